"""Checking `python:` refs (`module:attribute`) without running the user's code in this process.

A spec may name modules of the user's own (an agent, a reflector, a reward). Importing one runs
its code, which may print (the MCP server's stdout is its protocol stream), hang, or change this
process for good. So `check` imports them in a child process instead, one child for a check:

    check_refs(["tests.keyword_domain:answer", "this:s"])
    == {"tests.keyword_domain:answer": None, "this:s": "'s' is a value of type str, not a function ...; it printed: ..."}

The child (`refcheck_child`, run from this copy of the package, first on its PYTHONPATH, so that
it speaks the same protocol) imports the refs in turn; for a process or Ray executor it pickles
each as that executor would, and for a reward asked for (`call`) it calls it once, as
`ref(task, output)`, and says what it raised or returned that is not a number in [0, 1], in the
words the run would stop with (`reward_problem`). It writes each verdict to a file as soon as it
has it, so nothing the user's module prints can pass for one, and a ref that ends the child
(`os._exit`, a signal) or keeps it past `timeout` seconds (for the whole check) costs the refs
before it nothing: that ref is named as the one whose check did not end, and those after it as
not checked. What was printed while a ref was checked (stdout and stderr, the last `OUTPUT_BYTES`)
comes through a pipe of its own and is quoted, redacted, in that ref's failure; a ref whose module
an earlier ref imported quotes what that import printed too. The child starts in a scratch folder
of its own, so that a module planted in the user's folder (a `json.py`) cannot stand in for one
the check itself needs, then moves to `cwd` (default the current folder) and puts it first on
`sys.path`, as the run's own process does. Its stdin is /dev/null; it runs in its own process
group, killed with the group when the check ends, and never outlives the process that asked for
it, however that one ended (it watches its parent: `refcheck_child`). This module lives outside
`agentdescent.runs` so that the child imports next to nothing of ours.
Left out: calling an agent or a reflector (only the run's own process does), and a fresh
interpreter for each ref: what one ref's module does to the process (`sys.path`, a patched
library) is there for the refs after it, as it is in the run's process, which imports them all.
"""

from __future__ import annotations

import contextlib
import decimal
import json
import math
import numbers
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agentdescent.returned import ASYNC_GIVEN, unfinished

CHILD_MODULE = "agentdescent.refcheck_child"
REF_CHECK_SECONDS = 30.0  # for a whole check: its refs, and the reward's call
OUTPUT_BYTES = 16_000  # the tail of what was printed while one ref was checked, kept for a failure's message
QUOTED_CHARS = 120  # of that tail, quoted in a failure
SCRATCH_PREFIX = "agentdescent-refcheck-"  # the checks' scratch folders in the temp folder (runs --prune knows it)
_REASON_CHARS = 200
UNPICKLABLE = "it loads, but cannot be pickled: "  # how a verdict on a ref that does not travel begins
NOT_CHECKED = "not checked: "  # how the verdict on a ref after one whose check did not end begins


def check(refs: Sequence[str], *, call: tuple[str, dict, str] | None = None, cwd: str | os.PathLike | None = None,
          timeout: float = REF_CHECK_SECONDS, executor: str = "thread") -> tuple[dict[str, str | None], str | None]:
    """Each of `refs` mapped to None when it imports and names something callable (that pickles,
    for an `executor` that sends it to other processes: "process" or "ray"), else to why not (the
    exception, or how the child ended, then a redacted excerpt of what it printed); and, for a
    `call` `(ref, task, output)`, None when that reward, called once as `ref(Task(**task), output)`,
    returns a number in [0, 1] (what the run takes) or is a model judge (`scoring.Judge`, not
    called: that would be a model call), else why not (None too when no call is asked for). One
    child process does it all, given `timeout` seconds in all; raises nothing for a bad ref."""
    refs = list(dict.fromkeys(refs))
    items = [(ref, "importing") for ref in refs] + ([(call[0], "calling")] if call is not None else [])
    if not items:  # a spec without `python:` refs: no process to start
        return {}, None
    asked = {"refs": refs, "executor": None if executor == "thread" else executor,
             "call": None if call is None else dict(zip(("ref", "task", "output"), call, strict=True))}
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as folder:
        child = _Child(asked, Path(folder), Path(cwd or os.getcwd()), len(items))
        said = child.verdicts(items, time.monotonic() + timeout, timeout)
    return dict(zip(refs, said, strict=False)), (said[-1] if call is not None else None)


def check_refs(refs: Sequence[str], *, cwd: str | os.PathLike | None = None, timeout: float = REF_CHECK_SECONDS,
               executor: str = "thread") -> dict[str, str | None]:
    """`check` of `refs` alone: each mapped to None when it loads, else to why not."""
    return check(refs, cwd=cwd, timeout=timeout, executor=executor)[0]


class _Child:
    """A check's process, the pipe each of its items (a ref, the call) prints to, and their tails."""

    def __init__(self, asked: dict, folder: Path, origin: Path, items: int) -> None:
        self.verdicts_file, self.unstarted = folder / "verdicts.jsonl", None
        self.kept = [bytearray() for _ in range(items + 1)]  # the last: what the child printed outside any item
        pipes: list[tuple[int, int]] = []
        try:
            for _ in range(items):
                pipes.append(os.pipe())
            writing = [write for _, write in pipes]
            (folder / "asked.json").write_text(json.dumps({**asked, "fds": writing}), encoding="utf-8")
            self.proc = subprocess.Popen([sys.executable, "-m", CHILD_MODULE, str(os.getpid()), str(origin), str(folder)],
                                         cwd=folder, env=_our_package_first(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                         pass_fds=writing)
        except OSError as exc:  # too many processes or files, a cwd gone: nothing can be checked, say why
            for read, _ in pipes:
                os.close(read)
            self.unstarted = f"cannot start a process to check it ({exc.strerror or exc}); try again"
            return
        finally:
            for _, write in pipes:  # the child's now: this process holding them would keep their readers waiting
                os.close(write)
        streams = [os.fdopen(read, "rb") for read, _ in pipes] + [self.proc.stdout]
        self.readers = [threading.Thread(target=_drain, args=(stream, kept), daemon=True, name="agentdescent-refcheck")
                        for stream, kept in zip(streams, self.kept, strict=True)]
        for reader in self.readers:
            reader.start()

    def verdicts(self, items: list[tuple[str, str]], until: float, timeout: float) -> list[str | None]:
        """Each item's verdict, None when it loads (or scores); the child and its group are gone on return."""
        if self.unstarted is not None:
            return [self.unstarted] * len(items)
        try:
            code: int | None = self.proc.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # whatever it started goes too
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        joined = time.monotonic() + 5  # a process that left the group may hold a pipe: not waited for
        for reader in self.readers:
            reader.join(timeout=max(0.0, joined - time.monotonic()))
        said, found, stopped = _said(self.verdicts_file), [], None
        for i, (ref, doing) in enumerate(items):
            mine = said.get(i, {})
            if "error" in mine:
                why = str(mine["error"] or "")
            elif stopped is None:
                why, stopped = _how(code, timeout, doing), ref
            else:
                found.append(f"{NOT_CHECKED}the check of {stopped!r} before it did not end, and one process checks "
                             "them in turn; fix that one first")
                continue
            printed = [j for j in mine.get("printed", []) if isinstance(j, int) and 0 <= j < i]
            output = b"".join(bytes(self.kept[j]) for j in (-1, *printed, i))
            found.append(None if why == "" else _with_output(why, _excerpt(output)))
        return found


def _our_package_first() -> dict[str, str]:
    """This environment with the folder this package was loaded from first on PYTHONPATH, where it
    is a checkout: the child runs this very copy of the check, which speaks the same arguments. An
    installed copy's folder (site-packages) is left where it is: put before the standard library,
    a backport installed there would stand in for the module it backports."""
    ours = Path(__file__).resolve().parents[1]
    if ours.name in ("site-packages", "dist-packages"):
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ours), os.environ.get("PYTHONPATH")]))}


def _drain(stream, kept: bytearray) -> None:
    """Read `stream` to its end, keeping its last `OUTPUT_BYTES` (the child never blocks on a full pipe)."""
    with stream:
        while chunk := stream.read1(65536):
            kept += chunk
            del kept[:-OUTPUT_BYTES]


def _said(verdicts: Path) -> dict[int, dict]:
    """What the child wrote of each item, by its index: {"printed": [...]} as it began it, and
    {"error": None or why not} once it knew (the item loads, or scores, on None)."""
    found: dict[int, dict] = {}
    try:
        lines = verdicts.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return found
    for line in lines:
        with contextlib.suppress(ValueError):  # a line the child did not finish
            entry = json.loads(line)
            if isinstance(entry, dict) and isinstance(entry.get("item"), int):
                found.setdefault(entry["item"], {}).update(entry)
    return found


def _how(code: int | None, timeout: float, doing: str) -> str:
    """How the check of the item the child was `doing` ("importing", "calling") ended without its verdict."""
    if code is None:
        return f"the check took over {timeout:g} s and was stopped while {doing} it"
    if code < 0:
        return f"the process {doing} it was killed by signal {-code}"
    return (f"the process {doing} it ended with exit code {code} before saying "
            f"{'whether it loads' if doing == 'importing' else 'what it returned'}")


def _excerpt(output: bytes) -> str:
    """The end of what the child printed, on one line, redacted; "" for nothing."""
    from agentdescent.agents.redact import redact  # here, not at the top: the child never needs it

    text = " ".join(output.decode("utf-8", errors="replace").split())
    text = redact(text)
    return text if len(text) <= QUOTED_CHARS else "…" + text[-QUOTED_CHARS:]


def _with_output(reason: str, said: str) -> str:
    from agentdescent.agents.redact import redact  # here, not at the top: the child never needs it

    reason = redact(" ".join(reason.split()))
    reason = reason if len(reason) <= _REASON_CHARS else reason[:_REASON_CHARS] + "…"
    return f"{reason}; it printed: {said}" if said else reason


def reward_problem(value: object, task_id: str) -> str | None:
    """Why `value` is no reward, in the words the run (`units.check_reward`) and plan both use;
    None for a number in [0, 1]; a coroutine or a generator is closed. reward_problem(2.0, "t1") names 2.0 and [0, 1]"""
    kind = unfinished(value)
    if kind is not None:
        return f"reward returned {kind} for task {task_id!r}, not its score: {ASYNC_GIVEN}"
    if isinstance(value, (str, bytes)) or not is_number(value):
        return f"reward returned {value!r} ({type(value).__name__}) for task {task_id!r}; it must return a number in [0, 1]"
    try:
        if getattr(value, "ndim", 0):  # an array, of one element too: numpy before 2.3 makes that one a float, warning
            raise TypeError("an array is no number")
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int or a Fraction past any float
        size = f"an int of {value.bit_length()} bits" if isinstance(value, int) else f"a {type(value).__name__} past any float"
        return f"reward returned {size} for task {task_id!r}; it must be in [0, 1] (scale or clip it)"
    except Exception:  # noqa: BLE001 -- a number-like that is not one number: a numpy array of several, say
        return (f"reward returned {_shown(value)} ({type(value).__name__}) for task {task_id!r}; it must return one "
                "number in [0, 1] (for a one-element array, its item())")
    if math.isnan(number) or not 0.0 <= number <= 1.0:
        return f"reward returned {value} for task {task_id!r}; it must be in [0, 1] (scale or clip it)"
    return None


def _shown(value: object) -> str:
    try:
        return str(value)[:80]
    except Exception:  # noqa: BLE001 -- its __str__ raises too
        return "a value that cannot be shown"


def is_number(value: object) -> bool:
    """A real number as a reward may be one: is_number(True) and is_number(0.5), not is_number(None).
    The run's own check of a reward (`engine.calls.units.check_reward`) asks this too."""
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "__float__")

