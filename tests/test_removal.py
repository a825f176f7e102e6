"""Folders an agent worked in are removed whole, a folder it made read-only inside them too (as `go
mod download` leaves its module cache): checked as a user whom permission bits bind, since root
ignores them (under a user namespace when the tests run as root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def as_a_user(script: str, folder: Path) -> dict:
    """Run `script` (which prints one JSON line) in a child that permission bits bind, with TMPDIR
    at `folder`."""
    folder.chmod(0o777)
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("the tests run as root and there is no unshare to run as another user")
        prefix = ["unshare", "-U"]
    done = subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "TMPDIR": str(folder), "PYTHONPATH": str(ROOT)})
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no user namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


READ_ONLY_INSIDE = """
    import json, os, tempfile
    from pathlib import Path

    def read_only_inside(folder):
        cache = Path(folder, "pkg", "mod@v1")
        cache.mkdir(parents=True)
        (cache / "go.mod").write_text("module x\\n")
        os.chmod(cache, 0o555)
        os.chmod(cache.parent, 0o555)
"""


def test_a_rollout_folder_with_a_read_only_folder_inside_is_removed_and_counted_only_when_gone(tmp_path):
    """`runs --prune` said it removed such a folder, again and again, and it stayed."""
    found = as_a_user(READ_ONLY_INSIDE + """
    from agentdescent.runs import rolloutdir
    folder = Path(tempfile.mkdtemp(prefix=rolloutdir.ROLLOUTS_PREFIX + "r1-"))
    read_only_inside(folder / "agentdescent-ws-1")
    print(json.dumps({"counted": rolloutdir.clear("r1"), "left": folder.exists()}))
    """, tmp_path)
    assert found == {"counted": [1, 0, 0], "left": False}


def test_a_reflection_in_a_folder_of_its_own_leaves_nothing_behind(tmp_path):
    found = as_a_user(READ_ONLY_INSIDE + """
    from agentdescent.runs.spec import AgentSpec
    from agentdescent.runs.wiring import _as_model

    def agent(prompt, cwd):
        read_only_inside(cwd)
        return "none"
    agent.works_in_a_folder = True
    work = Path(tempfile.mkdtemp())
    answer = _as_model(agent, AgentSpec(kind="python", ref="x:y"), work)("reflect")
    print(json.dumps({"answer": answer, "left": sorted(p.name for p in work.iterdir())}))
    """, tmp_path)
    assert found == {"answer": "none", "left": []}


def test_a_read_only_folder_holding_a_symlink_is_removed(tmp_path):
    """Making a link itself writable is no call Linux has: os.chmod raised NotImplementedError, not
    the OSError let pass, and the removal stopped there with it (a package cache's `.bin` links)."""
    found = as_a_user("""
    import json, os, tempfile
    from pathlib import Path
    from agentdescent.removal import remove_tree
    folder = Path(tempfile.mkdtemp())
    bin = folder / "node_modules" / ".bin"
    bin.mkdir(parents=True)
    (bin / "tool").symlink_to("../tool/cli.js")
    os.chmod(bin, 0o555)
    print(json.dumps({"gone": remove_tree(folder), "left": folder.exists()}))
    """, tmp_path)
    assert found == {"gone": True, "left": False}
