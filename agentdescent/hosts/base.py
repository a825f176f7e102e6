"""What a host module is (`Host`), and what it answers with: how a host stands here (`HostReport`)
and what an install or an uninstall did (`Changed`); with the helpers the host modules share.

Left out: the table of hosts (`agentdescent.hosts.HOSTS`) and the ways of wiring one (`wiring`,
`marked`, `bundle`).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from agentdescent.process import Killed, run_process

SCRIPTS = ("agentdescent-mcp", "agentdescent-hook")  # what the hosts' configurations start, by name


def scripts_not_on_path() -> str | None:
    """What to do when the scripts the hosts start by name are not on PATH (None when they are):
    wired, the host would not find them."""
    missing = [name for name in SCRIPTS if shutil.which(name) is None]
    if not missing:
        return None
    return (f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH, and the host starts "
            f"{'it' if len(missing) == 1 else 'them'} by name: put {Path(sys.executable).parent} on PATH (or install "
            "agentdescent with pipx), then start a new host session")


@runtime_checkable
class Host(Protocol):
    """A coding agent that AgentDescent wires itself into: our MCP server (`agentdescent-mcp`) and
    the skill. Each host is one module of `agentdescent.hosts` (a module meets this Protocol with
    its top-level names) and one row of `agentdescent.hosts.HOSTS`.

    `HOST` is the name `agentdescent install HOST` takes, and its bundle's folder under
    `plugins/`. `PROGRAM` is the host's CLI, looked up on PATH: `report` says whether it is there;
    a host wired through its CLI (Claude Code) needs it to install and uninstall, a host wired
    through its files (Codex, DeepSeek Harness) does not, though the `install` command refuses
    without it unless told `--without-cli` (`agentdescent.cli.hosts`). `SKILL` is where the host's bundle holds
    its copy of the skill (`bundle` keeps it in step with `skills/agentdescent/SKILL.md`); install
    puts that file where the host reads skills.

    `report()` never raises, changes nothing, and runs at most `PROGRAM --version`.
    `install(force=False)` wires the server and the skill; run again, it changes nothing or
    brings them up to date. Without `force` it refuses to replace anything it did not write; what
    `force` may replace, the host module's docstring says. `uninstall()` takes out what install
    put in and nothing else: the host's other settings keep their values (byte for byte where we edit the
    file; a host whose own commands do the work may rewrite the file's layout). What install keeps for
    itself (a record of what it wrote, a marketplace folder) goes in `home() / "hosts"`
    (`agentdescent.home`), and uninstall finds it there or, when it runs with another home, from
    what the host's own configuration says of it. Both raise `UserError`, with the fix, when they cannot do what was
    asked, and then change nothing.
    """

    HOST: str
    PROGRAM: str
    SKILL: str

    def report(self) -> HostReport: ...

    def install(self, *, force: bool = False) -> Changed: ...

    def uninstall(self) -> Changed: ...


class HostReport(BaseModel):
    host: str
    installed: bool  # the host's CLI is on PATH
    version: str | None = None
    wired: bool  # our MCP server is in the host's configuration
    how: str  # what to run to wire it, or where it is wired
    config: str | None = None  # the file or folder the host's configuration is in
    problem: str | None = None  # what is wrong with that configuration, with the fix


class Changed(BaseModel):
    host: str
    action: str  # install or uninstall
    paths: list[str] = Field(default_factory=list)  # files written or removed
    commands: list[str] = Field(default_factory=list)  # host commands run, as typed
    message: str
    next: str = ""


def version(program: str) -> str | None:
    """The first line `PROGRAM --version` prints, when it reads as a version (printable, with a
    digit); None when it fails, prints something else or takes over 10 s. Asked once per program
    file (a CLI that hangs costs `doctor` 10 s, not 10 s a question)."""
    return _asked(program)[0]


def cannot_start(program: str) -> str | None:
    """Why `program`, found by that name or path, cannot start at all; None when it starts (however
    its `--version` then went). An executable text file whose `#!` interpreter is missing fails
    with "No such file or directory", which would read as the file itself missing."""
    return _asked(program)[1]


def not_executable(name: str) -> str | None:
    """A file named `name` on PATH that is not executable (which `shutil.which` passes over), or None."""
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return next((str(Path(f, name)) for f in folders if f and Path(f, name).is_file()
                 and not os.access(Path(f, name), os.X_OK)), None)


def _asked(program: str) -> tuple[str | None, str | None]:
    path = shutil.which(program) or program
    try:
        changed = os.stat(path).st_mtime_ns
    except OSError:
        return None, None
    return _version(path, changed)


@functools.lru_cache(maxsize=64)
def _version(path: str, changed: int) -> tuple[str | None, str | None]:
    try:
        done = run_process([path, "--version"], timeout=10)
    except OSError as exc:
        return None, _why_not(path, exc)
    except Killed:
        return None, None
    first = (done.stdout or done.stderr).strip().splitlines()
    line = first[0][:80] if done.returncode == 0 and first else ""
    readable = line.isprintable() and "\ufffd" not in line and any(c.isdigit() for c in line)
    return (line if readable else None), None


def _why_not(path: str, exc: OSError) -> str:
    if exc.errno == errno.ENOENT and os.path.isfile(path):
        with open(path, "rb") as file:
            head = file.read(128).split(b"\n")[0].decode("utf-8", "replace")
        return (f"{path} cannot start: the interpreter its first line names is not there "
                f"({head[:80]!r}); reinstall it")
    if exc.errno in (errno.EACCES, errno.ENOEXEC):
        return f"{path} cannot start ({exc.strerror}): it is not a program this system can run; reinstall it"
    return f"{path} cannot start: {exc.strerror or exc}"


def to_wire(host: str, *, found: bool, product: str, package: str) -> str:
    """What to run when `host` is not wired: install it, if its CLI is missing, then us."""
    then = f"agentdescent install {host}"
    return then if found else f"install {product} (npm install -g {package}), then {then}"


def wired_in(host: str, config: Path, by_us: bool) -> str:
    """Where `host` is wired, and by whom."""
    return f"wired in {config}" + (f" by `agentdescent install {host}`" if by_us else " (by hand)")
