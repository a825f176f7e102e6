"""The real host CLIs (Claude Code, Codex) for the tests that drive them, or a clear skip.

`.ci/run` installs them from npm at the pinned versions into `.ci-hosts/` and points
`AGENTDESCENT_HOST_BIN` at their `node_modules/.bin`; a developer can point it at their own. Where
they are missing (npm was unreachable), a test that needs one is skipped and says why: it never
passes without having run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PINNED = {"claude": "@anthropic-ai/claude-code@2.1.332", "codex": "@openai/codex@0.171.0"}


def host_bin(name: str) -> Path:
    """The path of the host CLI `name` (claude or codex); skips the test when it is not installed."""
    folders = [os.environ.get("AGENTDESCENT_HOST_BIN", ""), str(ROOT / ".ci-hosts" / "node_modules" / ".bin")]
    for folder in filter(None, folders):
        found = shutil.which(name, path=folder)
        if found:
            return Path(found)
    pytest.skip(f"the {name} CLI is not installed: .ci/run installs {PINNED[name]} from npm into .ci-hosts/ "
                f"(was npm unreachable?), or set AGENTDESCENT_HOST_BIN to a folder that has it")


def without_hosts(*args: str, tmp_path: Path, home: str, **env: str) -> subprocess.CompletedProcess:
    """`agentdescent ARGS` as a user runs it with no host CLI on PATH: a HOME and a run store
    (`home`, a folder name) under `tmp_path`, and `env` on top (a host's own home variable)."""
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "user"), "AGENTDESCENT_HOME": str(tmp_path / home),
            "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=60)
