"""What this machine has for AgentDescent: git, the agent CLIs and their versions, which provider
keys are set (never their values), each host (installed, its version, whether our server is
wired, what to run to wire it), and the run store.

`doctor()` only reads: it runs each CLI's `--version` (a few seconds at most each) and asks each
host module for its report; `demo_ok` says whether `agentdescent demo` can run here (it needs git
and a writable temporary folder, nothing else). Left out: wiring a host (`agentdescent.hosts`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, Field

from agentdescent.agents.providers import BASE_URL_VARIABLES, KEY_VARIABLES, PROVIDERS
from agentdescent.hosts import HOSTS, HostReport, module
from agentdescent.hosts.base import cannot_start, not_executable, scripts_not_on_path, version
from agentdescent.runs.store import home

KEYS = KEY_VARIABLES  # the providers' table's (agents.providers), and HF_TOKEN
ENDPOINTS = BASE_URL_VARIABLES


class Program(BaseModel):
    name: str
    found: bool
    version: str | None = None
    path: str | None = None
    problem: str | None = None  # found but it cannot start, or a file of its name that is not executable


class DoctorReport(BaseModel):
    python: str
    agentdescent: str
    git: Program
    agents: list[Program]
    keys_set: list[str]  # names only
    keys_missing: list[str]
    endpoints_set: list[str]
    hosts: list[HostReport]
    store: str
    store_exists: bool
    store_writable: bool
    demo_ok: bool
    problems: list[str] = Field(default_factory=list)
    next: str


def doctor() -> DoctorReport:
    git = _program("git")
    hosts = [module(host) for host in HOSTS]
    programs = [host.PROGRAM for host in hosts] + [row.program for row in PROVIDERS.values() if row.program]
    agents = [_program(name) for name in dict.fromkeys(programs)]  # every host's CLI and every CLI agent's, once
    store = home() / "runs"
    writable = _writable(store)
    problems = []
    if not git.found:
        problems.append("git is not on PATH: the ledger is a git repository; install git")
    if not _writable(Path(tempfile.gettempdir())):
        problems.append(f"the temporary folder {tempfile.gettempdir()} is not writable; set TMPDIR")
    if not writable:
        problems.append(f"the run store {store} is not writable; set AGENTDESCENT_HOME to a writable folder")
    demo_ok = git.found and _writable(Path(tempfile.gettempdir()))
    reports = [host.report() for host in hosts]
    problems += [f"{r.host}: {r.problem}" for r in reports if r.problem]
    problems += [f"{p.name}: {p.problem}" for p in (git, *agents) if p.problem]
    unstartable = scripts_not_on_path()
    if unstartable and any(r.wired for r in reports):
        problems.append(f"{', '.join(r.host for r in reports if r.wired)} wired, but {unstartable}")
    keys = [k for k in KEYS if os.environ.get(k)]
    return DoctorReport(
        python=sys.version.split()[0], agentdescent=package_version(), git=git, agents=agents, keys_set=keys,
        keys_missing=[k for k in KEYS if k not in keys], endpoints_set=[e for e in ENDPOINTS if os.environ.get(e)],
        hosts=reports, store=str(store), store_exists=store.is_dir(),
        store_writable=writable, demo_ok=demo_ok, problems=problems,
        next="agentdescent demo runs a whole evolution offline" if demo_ok else "fix the problems above first",
    )


def _program(name: str) -> Program:
    path = shutil.which(name)
    if path is None:
        unrunnable = not_executable(name)
        return Program(name=name, found=False, problem=unrunnable and f"{unrunnable} is on PATH but not executable: "
                                                                     f"chmod +x it, or reinstall it")
    return Program(name=name, found=True, version=version(path), path=path, problem=cannot_start(path))


def package_version() -> str:
    """The installed package's version, as `agentdescent --version` prints it."""
    try:
        return metadata.version("agentdescent")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _writable(folder: Path) -> bool:
    """Whether files could be made in `folder`, or in the folders it would be made in: asked of the
    system, nothing made (a mistyped home must not come into being by being checked)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
