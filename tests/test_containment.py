"""Where a target may be (`agentdescent.runs.containment`): plan and start refuse a symlink, a path
through one, the run store, a kernel file, the home folder, the root and AgentDescent's own code,
each as a problem of the target's that says why and what to give instead."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp
import pytest
from agentdescent_mcp.server import server

from agentdescent.runs.spec import SpecError
from tests import keyword_domain as domain
from tests.mcp_support import REPO, fails


def _refused(service, folder: Path, target: str, **fields) -> str:
    """The target's problem when `service.plan` and `service.start` refuse `target` (in the domain's
    spec on `folder`)."""
    spec = {**domain.spec(folder), "target": target, **fields}
    before = service.runs()
    for verb in (service.plan, service.start):
        with pytest.raises(SpecError) as caught:
            verb(spec)
        said = {p.field: p.message for p in caught.value.problems}
        assert "target" in said, said
    assert service.runs() == before  # nothing started
    return said["target"]


def test_a_symlinked_target_and_a_target_behind_a_symlink_are_refused(service, tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (real / "prompt.md").write_text("Answer with the code.\n", encoding="utf-8")
    (tmp_path / "prompt-link.md").symlink_to(real / "prompt.md")
    (tmp_path / "linked").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    said = _refused(service, tmp_path, str(tmp_path / "prompt-link.md"))
    assert "is a symlink" in said and f"give the real path, {real / 'prompt.md'}" in said
    said = _refused(service, tmp_path, str(tmp_path / "linked" / "prompt.md"))
    assert f"{tmp_path / 'linked'} is a symlink on the way" in said
    monkeypatch.chdir(REPO)  # where the domain's refs import from
    assert service.plan(domain.spec(real)).kind == "text"  # the real path is fine


def test_the_run_store_and_a_folder_holding_it_are_refused(service, tmp_path):
    other = service.store.root / "other-run-1"
    other.mkdir(parents=True)
    (other / "status.json").write_text("{}\n", encoding="utf-8")
    assert "is in the run store" in _refused(service, tmp_path, str(other / "status.json"))
    assert "or holds it" in _refused(service, tmp_path, str(tmp_path), kind="agent_dir")  # the store is tmp_path/home


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no /proc here")
def test_a_kernel_file_is_refused(service, tmp_path):
    assert "is under /proc" in _refused(service, tmp_path, "/proc/self/environ")


def test_the_home_folder_and_the_root_are_refused(service, tmp_path, monkeypatch):
    home = tmp_path / "me"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert "is your home folder" in _refused(service, tmp_path, "~", kind="agent_dir")
    assert "is your home folder or holds it" in _refused(service, tmp_path, str(tmp_path), kind="agent_dir")
    assert "is the root folder" in _refused(service, tmp_path, "/", kind="agent_dir")


def test_agentdescents_own_code_is_refused(service, tmp_path):
    assert "AgentDescent's own code" in _refused(service, tmp_path, str(REPO / "agentdescent" / "errors.py"))
    assert "AgentDescent's own code" in _refused(service, tmp_path, str(REPO), kind="agent_dir")


def test_the_mcp_plan_tool_says_why_a_target_is_refused(service, tmp_path):
    (tmp_path / "real.md").write_text("Answer with the code.\n", encoding="utf-8")
    (tmp_path / "prompt.md").symlink_to(tmp_path / "real.md")

    async def main() -> None:
        async with mcp.Client(server, mode="legacy") as client:
            said = await fails(client, "plan", spec=domain.spec(tmp_path))
            assert "target: " in said and "is a symlink" in said and "give the real path" in said

    anyio.run(main)


def test_a_target_whose_path_holds_a_line_break_is_refused(tmp_path):
    """Every line naming the target (status, runs, show's patch) would carry it: a forged line."""
    from agentdescent.runs.containment import refusal

    target = tmp_path / "nl\n-injected line"
    target.write_text("x\n", encoding="utf-8")
    assert "nl\\n-injected line holds a line break or a control character" in refusal(target)
