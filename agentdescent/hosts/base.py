"""What every host module answers with: how a host stands here, and what an install or an uninstall did.

Each host module (`claude_code`, `codex`, `deepseek`) has the same three functions:

    report() -> HostReport          is the host's CLI here, which version, is our server wired, how to wire it
    install(*, force=False) -> Changed     wire our MCP server and the skill into the host
    uninstall() -> Changed          take out exactly what install put in, nothing else

Each raises `UserError` (with the fix) when it cannot do what was asked, and changes nothing then.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from agentdescent.process import Killed, run_process


class HostReport(BaseModel):
    host: str
    installed: bool  # the host's CLI is on PATH
    version: str | None = None
    wired: bool  # our MCP server is in the host's configuration
    how: str  # what to run to wire it, or where it is wired
    config: str | None = None  # the file or folder the host's configuration is in


class Changed(BaseModel):
    host: str
    action: str  # install or uninstall
    paths: list[str] = Field(default_factory=list)  # files written or removed
    commands: list[str] = Field(default_factory=list)  # host commands run, as typed
    message: str
    next: str = ""


def version(program: str) -> str | None:
    """The first line `PROGRAM --version` prints, or None when it fails or takes over 10 s."""
    try:
        done = run_process([program, "--version"], timeout=10)
    except (OSError, Killed):
        return None
    first = (done.stdout or done.stderr).strip().splitlines()
    return first[0][:80] if done.returncode == 0 and first else None


def to_wire(host: str, *, found: bool, product: str, package: str) -> str:
    """What to run when `host` is not wired: install it, if its CLI is missing, then us."""
    then = f"agentdescent install {host}"
    return then if found else f"install {product} (npm install -g {package}), then {then}"


def wired_in(host: str, config: Path, by_us: bool) -> str:
    """Where `host` is wired, and by whom."""
    return f"wired in {config}" + (f" by `agentdescent install {host}`" if by_us else " (by hand)")
