"""A target or tasks holding a key's value: refused before the run, or run masked and written back
with the value where the user had it (runs/keys.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentdescent import UserError
from agentdescent.runs import keys
from agentdescent.runs.spec import SpecError
from tests import keyword_domain as domain
from tests.runs_support import wait

KEY = "sk-live-4f9b2c7d1e8a6053"
TARGET_TEXT = f"Answer with the code.\n\nOur deploy token is {KEY}\n"


@pytest.fixture
def key_in_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def stored_text(folder: Path) -> str:
    """Every byte the run keeps: its files, and its ledger's history and objects, decompressed."""
    files = "\n".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder / "ledger"), *args], capture_output=True,
                              check=True).stdout.decode("utf-8", "replace")

    return files + git("log", "-p", "--all") + git("cat-file", "--batch-all-objects", "--batch")


def test_a_target_holding_a_key_is_refused_before_anything_is_stored(service, tmp_path, key_in_env):
    spec = domain.spec(tmp_path)
    Path(spec["target"]).write_text(TARGET_TEXT, encoding="utf-8")
    for verb in (service.plan, service.start):
        with pytest.raises(SpecError) as refused:
            verb(spec)
        assert refused.value.problems[0].field == "target"
        assert "prompt.md: line 3 holds the value of OPENAI_API_KEY" in str(refused.value)
        assert "keys_in_target: mask" in str(refused.value) and KEY not in str(refused.value)
    assert service.runs() == []
    assert Path(spec["target"]).read_text(encoding="utf-8") == TARGET_TEXT


@pytest.mark.parametrize("policy", ["refuse", "mask"])
def test_a_file_that_is_not_text_and_holds_a_key_is_refused_whatever_the_policy(service, tmp_path, key_in_env, policy):
    folder = tmp_path / "skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: skill\n---\nAnswer with the code.\n", encoding="utf-8")
    (folder / "blob.bin").write_bytes(b"\0\x01" + KEY.encode() + b"\xff")
    spec = {**domain.spec(tmp_path), "target": str(folder), "keys_in_target": policy}
    with pytest.raises(SpecError) as refused:
        service.plan(spec)
    assert "blob.bin holds the value of OPENAI_API_KEY" in str(refused.value) and "exclude" in str(refused.value)
    assert KEY not in str(refused.value)
    assert service.plan({**spec, "exclude": ["blob.bin"]}).carried == []


def test_tasks_holding_a_key_are_refused(service, tmp_path, key_in_env):
    spec = domain.spec(tmp_path)
    spec["tasks"] = [*spec["tasks"][:-1], {"id": "leak", "prompt": f"use {KEY}", "gold": "k0"}]
    with pytest.raises(SpecError, match="task leak holds the value of a key") as refused:
        service.plan(spec)
    assert refused.value.problems[0].field == "tasks"


def test_a_masked_run_never_stores_the_key_and_accept_puts_it_back(service, tmp_path, key_in_env):
    spec = domain.spec(tmp_path, keys_in_target="mask")
    target = Path(spec["target"])
    target.write_text(TARGET_TEXT, encoding="utf-8")
    started = service.start(spec)
    assert wait(service, started.run_id).state == "finished"
    shown = service.show(started.run_id)
    assert "[redacted OPENAI_API_KEY]" in shown.diff and KEY not in shown.model_dump_json()
    assert KEY not in stored_text(service.store.get(started.run_id).path)
    assert shown.markers_left == [] and shown.next.startswith(f"agentdescent accept {started.run_id} writes this back")

    dry = service.accept(started.run_id, dry_run=True)
    assert dry.markers_left == [] and "marker" not in dry.message
    done = service.accept(started.run_id)
    assert done.markers_left == [] and "marker" not in done.message
    written = target.read_text(encoding="utf-8")
    assert written.startswith(TARGET_TEXT) and "rule k0." in written and "[redacted" not in written


def test_a_masked_run_is_not_written_back_without_its_key(service, tmp_path, key_in_env, monkeypatch):
    spec = domain.spec(tmp_path, keys_in_target="mask", rounds=2)
    target = Path(spec["target"])
    target.write_text(TARGET_TEXT, encoding="utf-8")
    started = service.start(spec)
    assert wait(service, started.run_id).state == "finished"
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(UserError, match="set it in this environment as when the run started"):
        service.accept(started.run_id)
    assert target.read_text(encoding="utf-8") == TARGET_TEXT


def test_masking_refuses_a_target_that_already_reads_like_a_marker(service, tmp_path, key_in_env):
    spec = domain.spec(tmp_path, keys_in_target="mask")
    Path(spec["target"]).write_text(f"{TARGET_TEXT}an example: [redacted OPENAI_API_KEY]\n", encoding="utf-8")
    with pytest.raises(SpecError, match="already holds text like") as refused:
        service.plan(spec)
    assert refused.value.problems[0].field == "keys_in_target"


def test_accept_writes_a_key_only_where_the_target_held_it(service, tmp_path, key_in_env, monkeypatch):
    monkeypatch.setenv("OTHER_SECRET_TOKEN", "ghp_other-7d1e8a60534f9b2c")
    spec = domain.spec(tmp_path, keys_in_target="mask", rounds=4, reflector="python:tests.keyword_domain:marker_rule")
    target = Path(spec["target"])
    target.write_text(TARGET_TEXT, encoding="utf-8")
    started = service.start(spec)
    assert wait(service, started.run_id).state == "finished"
    shown = service.show(started.run_id)
    assert "+rule k0. Debug with [redacted OPENAI_API_KEY]" in shown.diff
    assert shown.markers_left[:3] == [f"prompt.md line 4: [redacted {name}]" for name in ("OPENAI_API_KEY", "OTHER_SECRET_TOKEN", "HOME")]
    said = f"{len(shown.markers_left)} markers left as they are: not where the target held the key"
    assert said in shown.next

    dry = service.accept(started.run_id, dry_run=True)
    assert said in dry.message and dry.markers_left == shown.markers_left and dry.markers_left_total == len(shown.markers_left)
    done = service.accept(started.run_id)
    assert said in done.message and done.markers_left == shown.markers_left
    written = target.read_text(encoding="utf-8")
    assert written.startswith(TARGET_TEXT) and written.count(KEY) == 1
    assert "rule k0. Debug with [redacted OPENAI_API_KEY] and [redacted OTHER_SECRET_TOKEN] from [redacted HOME]." in written
    assert "ghp_other" not in written and os.environ["HOME"] not in written


MASKED = "Our deploy token is [redacted OPENAI_API_KEY]"


def test_a_kept_line_gets_its_key_back_exactly_around_the_runs_edits(key_in_env):
    target = f"Answer with the code.\r\n{MASKED}\r\nThe end."
    result = f"First, a new line.\r\nAnswer with the code, now.\r\n{MASKED}\r\nThe end.\nrule k0.\n"
    assert keys.unmasked(result, target) == result.replace("[redacted OPENAI_API_KEY]", KEY)
    assert keys.left(result, target, name="prompt.md") == []
    assert keys.unmasked(target, target) == target.replace("[redacted OPENAI_API_KEY]", KEY)


def test_a_marker_the_run_wrote_or_changed_is_left_as_it_is(key_in_env, monkeypatch):
    monkeypatch.setenv("OTHER_SECRET_TOKEN", "ghp_other-7d1e8a60534f9b2c")
    target = f"Answer.\n{MASKED}\n"
    result = (f"Answer.\n{MASKED}\n{MASKED}, say it to users.\nuse [redacted OTHER_SECRET_TOKEN] in [redacted HOME]\n"
              f"{MASKED}\n")
    written = keys.unmasked(result, target)
    assert written.split("\n")[1] == f"Our deploy token is {KEY}" and written.count(KEY) == 1
    assert written.split("\n")[2:] == result.split("\n")[2:]
    assert keys.left(result, target, name="prompt.md") == [
        "prompt.md line 3: [redacted OPENAI_API_KEY]", "prompt.md line 4: [redacted OTHER_SECRET_TOKEN]",
        "prompt.md line 4: [redacted HOME]", "prompt.md line 5: [redacted OPENAI_API_KEY]"]


def test_a_folders_masked_line_gets_its_key_back_only_in_its_own_file(key_in_env):
    target = {"SKILL.md": f"---\nname: s\n---\n{MASKED}\n", "notes.md": "Notes.\n"}
    moved = {"SKILL.md": "---\nname: s\n---\nNo token here.\n", "notes.md": f"Notes.\n{MASKED}\n", "new.md": f"{MASKED}\n"}
    assert keys.unmasked(moved, target) == moved
    assert keys.left(moved, target, name="skill") == [
        "notes.md line 2: [redacted OPENAI_API_KEY]", "new.md line 1: [redacted OPENAI_API_KEY]"]
    kept = {**moved, "SKILL.md": f"---\nname: s\ndescription: more\n---\n{MASKED}\nrule k0.\n"}
    assert keys.unmasked(kept, target)["SKILL.md"] == kept["SKILL.md"].replace("[redacted OPENAI_API_KEY]", KEY)
