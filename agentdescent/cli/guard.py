"""An error as the person running a command should see it: one `error:` line with its fix, and an
exit code; the traceback only when asked for.

`guarded` runs each verb of the `agentdescent` command; `script` runs a program's `main` the same
way (the examples'), so that a missing key ends in the line that says how to set it rather than in
a traceback. This module imports nothing of the command itself, so that a program can use it
without loading every verb. Left out: the verbs (`agentdescent.cli.main`, `verbs`).
"""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from agentdescent.agents.redact import redact
from agentdescent.cli.terminal import console_for
from agentdescent.errors import AgentDescentError, UserError
from agentdescent.home import HOME_ENV, home
from agentdescent.quoting import shown
from agentdescent.reading import unusable_path

Command = Callable[[argparse.Namespace, Console], int]
USAGE, FAILURE, INTERRUPTED = 2, 1, 130
DISK_ERRORS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM)  # the machine's, not a bug


def guarded(command: Command, args: argparse.Namespace, console: Console) -> int:
    """Run one verb and return its exit code. A `UserError` (the input is wrong) exits 2 and any
    other `AgentDescentError` 1, each printed as `error: <message>` on stderr; so is a path the system
    refuses for what it is, a name too long or a symlink loop (exit 2), and a disk that is full or
    read-only, or a file not writable or not readable (exit 1). The traceback is printed too with `--debug`.
    Anything else is a bug and keeps its traceback."""
    try:
        return command(args, console)
    except AgentDescentError as exc:
        if getattr(args, "debug", False):
            _trace()
        console_for(sys.stderr).print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True,
                                                        highlight=False)
        return USAGE if isinstance(exc, UserError) else FAILURE
    except OSError as exc:
        said = unusable_path(exc)  # a path no system can look up (too long, a symlink loop): the input's
        if said is not None:
            if getattr(args, "debug", False):
                _trace()
            console_for(sys.stderr).print(f"[red]error:[/red] {escape(said)}", soft_wrap=True, highlight=False)
            return USAGE
        if exc.errno not in DISK_ERRORS:
            raise
        if getattr(args, "debug", False):
            _trace()
        console_for(sys.stderr).print(f"[red]error:[/red] {escape(_unwritable(exc))}", soft_wrap=True, highlight=False)
        return FAILURE
    except KeyboardInterrupt:
        console_for(sys.stderr).print("interrupted", highlight=False)
        return INTERRUPTED


def _unwritable(exc: OSError) -> str:
    """A disk error in words: the file and its folder, and the fix; `AGENTDESCENT_HOME` named only
    for a file under it (the run store, the backups' record), which is all it moves. A file there
    that this process cannot read is named as such: making its folder writable would not help."""
    if not exc.filename:
        return (f"cannot write: {exc.strerror or exc}; free some space or make it writable (or set {HOME_ENV} to a "
                "folder that is) and try again")
    file = os.fsdecode(exc.filename)
    if exc.errno in (errno.EACCES, errno.EPERM) and _unreadable(file):
        return (f"cannot read {file}: {exc.strerror or exc}; make it readable (chmod u+rX {shlex.quote(file)}) and "
                "try again")
    folder = os.path.dirname(os.path.abspath(file))
    elsewhere = f" (or set {HOME_ENV} to a folder that is)" if Path(folder).is_relative_to(home()) else ""
    return (f"cannot write {file} in the folder {folder}: {exc.strerror or exc}; free some space or make the folder "
            f"writable{elsewhere} and try again")


def _unreadable(file: str) -> bool:
    """Whether `file` is there but this process cannot read it (a folder: list and enter it)."""
    if not os.path.lexists(file) or os.path.islink(file):
        return False
    wanted = os.R_OK | os.X_OK if os.path.isdir(file) else os.R_OK
    return not os.access(file, wanted)


def _trace() -> None:
    """The traceback being handled, on stderr with keys redacted and control characters shown as
    escapes: an error's text may quote a file or a reply that carries terminal sequences."""
    sys.stderr.write(shown(redact(traceback.format_exc())))


def script(body: Callable[[], object]) -> None:
    """Run a program's `main` (the examples') as the command runs a verb, through `guarded`: a
    `UserError` (a missing key, a bad path) is one `error:` line and exit 2, another error of this
    package exit 1; the traceback only when the program is given `--debug`. Otherwise the status
    `main` returns when that is an int, else 0 (a `main` may return its run's result)."""
    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")

    def status(args: argparse.Namespace, console: Console) -> int:
        returned = body()
        return returned if isinstance(returned, int) and not isinstance(returned, bool) else 0

    sys.exit(guarded(status, argparse.Namespace(debug=debug), console_for(sys.stdout)))
