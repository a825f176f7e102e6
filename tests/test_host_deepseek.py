"""Wiring DeepSeek Harness: our marked row in the user's cordis.patch.yml and the skill, put in and
taken out exactly. The harness does not start on machines like this one (/work/shared/HOSTS.md), so
what install writes is checked by loading the YAML and reading what it names, not by a live dsh."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from agentdescent.errors import UserError
from agentdescent.hosts import bundle, deepseek, wiring
from tests.host_clis import without_hosts
from tests.mcp_support import REPO

USER_PATCH = ("# my own layer\n"
              "- insert:\n"
              "    - id: mcp-files\n"
              "      name: '@deepseek-ai/dsh-mcp-client'\n"
              "      config:\n"
              "        serverName: files\n"
              "        transport: stdio\n"
              "        command: files-server\n"
              "        args: [--root, .]\n"
              "        cwd: !!js process.cwd()   # evaluated by the harness\n"
              "    - id: persona\n"
              "      name: '@deepseek-ai/dsh-persona'\n"
              "      config: {text: Be brief.}")  # a last line with no newline
FILES_ROW = {"id": "mcp-files", "name": deepseek.CLIENT,
             "config": {"serverName": "files", "transport": "stdio", "command": "files-server", "args": ["--root", "."],
                        "cwd": "process.cwd()"}}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """DSH_HOME (not created yet), HOME and the run store, all the test's own."""
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "agentdescent"))
    return tmp_path / "dsh"


def record_of(host: str) -> Path:
    """The record of the one install of `host` this test made (one per file wired)."""
    found = list((wiring.home() / "hosts").glob(f"{host}-*.json"))
    return found[0] if len(found) == 1 else wiring.home() / "hosts" / f"{host}-none.json"


def patch_with(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "cordis.patch.yml").write_bytes(text.encode("utf-8"))
    return home / "cordis.patch.yml"


def skill(home: Path) -> Path:
    return home / "skills" / "agentdescent" / "SKILL.md"


def ours(operations) -> list[dict]:
    return [row for op in operations for row in op.get("insert", []) if row["config"].get("command") == "agentdescent-mcp"]


def test_install_then_uninstall_gives_the_users_patch_back_byte_for_byte(home):
    patch = patch_with(home, USER_PATCH)
    patch.chmod(0o640)

    changed = deepseek.install()
    assert set(changed.paths) == {str(patch), str(skill(home))}
    operations = deepseek.load(patch.read_text(encoding="utf-8"))
    assert operations[0]["insert"][0] == FILES_ROW  # the user's row, its !!js value kept as a plain value
    rows = ours(operations)
    assert len(rows) == 1 and rows[0]["name"] == "@deepseek-ai/dsh-mcp-client"
    assert rows[0]["config"]["transport"] == "stdio" and rows[0]["config"]["serverName"] == "agentdescent"
    assert patch.read_text(encoding="utf-8").startswith(USER_PATCH + "\n")
    assert patch.stat().st_mode & 0o777 == 0o640
    assert skill(home).read_text(encoding="utf-8") == bundle.files("deepseek")[".agents/skills/agentdescent/SKILL.md"]
    assert deepseek.report().wired

    again = deepseek.install()
    assert again.paths == [] and "nothing changed" in again.message

    deepseek.uninstall()
    assert patch.read_bytes() == USER_PATCH.encode("utf-8")
    assert patch.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in home.iterdir()) == ["cordis.patch.yml"]
    assert not record_of("deepseek").exists() and not deepseek.report().wired


def test_without_a_patch_file_install_creates_one_and_uninstall_removes_it(home):
    deepseek.install()
    assert len(ours(deepseek.load((home / "cordis.patch.yml").read_text(encoding="utf-8")))) == 1
    deepseek.uninstall()
    assert not home.exists()


@pytest.mark.parametrize("text, says", [
    (USER_PATCH + "\n- insert:\n    - id: agentdescent\n      name: my-own-build\n", "of its own"),
    ("- insert:\n    - id: mine\n      name: '@deepseek-ai/dsh-mcp-client'\n      config: {serverName: agentdescent}\n",
     "of its own"),
    ("[]\n", "flow list"),
    ("plugins: {}\n", "not a YAML list"),
    ("- insert: [\n", "not valid YAML"),
    ("- insert: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(  # 700 bytes that read as 9 ** 7 values
        f"- insert: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 7)), "aliases .* past 100000"),
    ("- &me [*me]\n", "aliases .* without end"),
    ("- " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than it can be read"),
], ids=["own id", "own server name", "flow list", "mapping", "broken file", "alias bomb", "alias loop", "deep"])
def test_a_patch_our_row_cannot_join_is_refused_unchanged(home, text, says):
    patch = patch_with(home, text)
    for force in (False, True):
        with pytest.raises(UserError, match=says):
            deepseek.install(force=force)
        assert patch.read_bytes() == text.encode("utf-8")
        assert not (home / "skills").exists() and not record_of("deepseek").exists()


def test_a_skill_edited_after_install_survives_uninstall(home):
    patch = patch_with(home, USER_PATCH)
    deepseek.install()
    skill(home).write_text("---\nname: agentdescent\ndescription: my version\n---\n", encoding="utf-8")
    changed = deepseek.uninstall()
    assert "edited" in changed.message and skill(home).read_text(encoding="utf-8").endswith("my version\n---\n")
    assert patch.read_bytes() == USER_PATCH.encode("utf-8")


def test_the_tolerant_loader_keeps_unknown_tags_as_plain_values():
    text = "- a: !!js process.cwd()\n  b: !env [HOME, /tmp]\n  c: !custom {k: v}\n  d: !!int '3'\n"
    assert deepseek.load(text) == [{"a": "process.cwd()", "b": ["HOME", "/tmp"], "c": {"k": "v"}, "d": 3}]
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.safe_load(text)  # what the tolerant loader is for


@pytest.mark.parametrize("source", ["repository", "package"])
def test_the_shipped_row_loads_and_starts_our_entry_point(source):
    text = ((REPO / "plugins/deepseek/cordis.patch.yml").read_text(encoding="utf-8") if source == "repository"
            else bundle.files("deepseek")["cordis.patch.yml"])
    operations = deepseek.load(text)
    assert isinstance(operations, list) and len(operations) == 1 and list(operations[0]) == ["insert"]
    (row,) = operations[0]["insert"]
    assert row["name"] == "@deepseek-ai/dsh-mcp-client" and row["id"] == "agentdescent"
    config = row["config"]
    assert config["transport"] == "stdio" and config["command"] == "agentdescent-mcp" and config["args"] == []
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,32}", config["serverName"])  # the harness's rule for tool names
    assert config["toolCallTimeoutMs"] >= 60_000  # plan may load a dataset
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts["agentdescent-mcp"] == "agentdescent_mcp.server:main"


def test_the_shipped_skill_has_the_frontmatter_the_harness_reads():
    text = bundle.files("deepseek")[".agents/skills/agentdescent/SKILL.md"]
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["name"] == "agentdescent" and front["description"] and front["whenToUse"]


def cli(*args: str, home: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return without_hosts(*args, tmp_path=tmp_path, home=home, DSH_HOME=str(tmp_path / "dsh"))


def test_install_refuses_without_dsh_and_uninstall_with_another_home_takes_everything_out(home, tmp_path):
    patch = patch_with(home, USER_PATCH)
    refused = cli("install", "deepseek", home="first", tmp_path=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "`dsh` is not on PATH, so nothing was wired" in refused.stderr and "--without-cli" in refused.stderr
    assert patch.read_text(encoding="utf-8") == USER_PATCH and not skill(home).exists()
    wired = cli("install", "deepseek", "--without-cli", home="first", tmp_path=tmp_path)
    assert wired.returncode == 0, wired.stderr
    assert skill(home).exists() and any((tmp_path / "first" / "hosts").glob("deepseek-*.json"))
    gone = cli("uninstall", "deepseek", home="second", tmp_path=tmp_path)  # another AGENTDESCENT_HOME
    assert gone.returncode == 0, gone.stderr
    assert patch.read_text(encoding="utf-8") == USER_PATCH
    assert not (home / "skills").exists()
    assert [p.suffix for p in (tmp_path / "first" / "hosts").iterdir()] == [".lock"]  # the record gone, its lock left
