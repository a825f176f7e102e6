"""Wiring Codex: the marked block in config.toml and the skill, put in and taken out exactly; then
the real Codex CLI (tests/host_clis.py) using what install wrote, through its app-server's own MCP
client and, end to end, driven by a scripted model on loopback (tests/openai_responses.py)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from agentdescent.errors import UserError
from agentdescent.hosts import bundle, codex, marked, wiring
from tests import keyword_domain
from tests.host_clis import host_bin, without_hosts
from tests.loopback import LoopbackServer
from tests.mcp_support import ENDED, REPO, demo_spec
from tests.openai_responses import ScriptedModel, Turn, codex_config
from tests.procutil import close_and_wait
from tests.writeback_child import result_of

TOOLS = {"plan", "evolve", "status", "show", "accept", "reject", "cancel", "resume", "runs", "doctor",
         "host_next", "host_submit", "host_read", "host_release"}
APPROVED = 'mcp_servers.agentdescent.default_tools_approval_mode="approve"'
SKILL_SAYS = "Improve a prompt file, a skill folder"  # the skill's description begins so
USER_CONFIG = ('# my Codex settings\n'
               'model = "o3"  # the default\n'
               'approval_policy = "on-request"\n'
               '\n'
               '[mcp_servers.other]\n'
               'command = "other-server"\n'
               'args = ["--flag"]\n'
               '\n'
               '[mcp_servers.other.env]\n'
               'TOKEN_FILE = "~/.other"\n'
               '\n'
               '[profiles.fast]\n'
               'model = "o4-mini"')  # a last line with no newline


@pytest.fixture
def home(tmp_path, monkeypatch, request) -> Path:
    """CODEX_HOME (not created yet), HOME and the run store (conftest's `service` has its own), all the test's."""
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    if "service" not in request.fixturenames:
        monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "agentdescent"))
    return tmp_path / "codex"


def record_of(host: str) -> Path:
    """The record of the one install of `host` this test made (one per file wired)."""
    found = list((wiring.home() / "hosts").glob(f"{host}-*.json"))
    return found[0] if len(found) == 1 else wiring.home() / "hosts" / f"{host}-none.json"


def config_with(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_bytes(text.encode("utf-8"))
    return home / "config.toml"


def skill(home: Path) -> Path:
    return home / "skills" / "agentdescent" / "SKILL.md"


def test_install_then_uninstall_gives_the_users_config_back_byte_for_byte(home):
    config = config_with(home, USER_CONFIG)
    config.chmod(0o600)

    changed = codex.install()
    assert set(changed.paths) == {str(config), str(skill(home))}
    settings = tomllib.loads(config.read_text(encoding="utf-8"))
    assert settings["mcp_servers"]["agentdescent"]["command"] == "agentdescent-mcp"
    assert "AGENTDESCENT_HOME" in settings["mcp_servers"]["agentdescent"]["env_vars"]
    assert settings["mcp_servers"]["other"] == {"command": "other-server", "args": ["--flag"],
                                                "env": {"TOKEN_FILE": "~/.other"}}
    assert settings["model"] == "o3" and settings["profiles"] == {"fast": {"model": "o4-mini"}}
    assert config.read_text(encoding="utf-8").startswith(USER_CONFIG + "\n")
    assert config.stat().st_mode & 0o777 == 0o600
    assert skill(home).read_text(encoding="utf-8") == bundle.files("codex")["skills/agentdescent/SKILL.md"]
    manifest = json.loads(record_of("codex").read_text(encoding="utf-8"))
    assert manifest["files"] == [{"path": str(skill(home)), "sha256": wiring.sha256(skill(home).read_text(encoding="utf-8")),
                                  "replaced": None}]
    assert codex.report().wired and "agentdescent install codex" in codex.report().how

    changed = codex.uninstall()
    assert set(changed.paths) == {str(config), str(skill(home))}
    assert config.read_bytes() == USER_CONFIG.encode("utf-8")
    assert config.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in home.iterdir()) == ["config.toml"]  # the skill folders install made are gone
    assert not record_of("codex").exists()
    assert not codex.report().wired


def test_a_second_install_changes_nothing_and_a_newer_block_replaces_only_ours(home):
    config = config_with(home, USER_CONFIG)
    codex.install()
    once = config.read_bytes(), skill(home).read_bytes()
    again = codex.install()
    assert again.paths == [] and "nothing changed" in again.message
    assert (config.read_bytes(), skill(home).read_bytes()) == once

    older = config.read_text(encoding="utf-8").replace("tool_timeout_sec = 120", "tool_timeout_sec = 60")
    config.write_text(older, encoding="utf-8")  # the block an older version of the package wrote, and recorded
    record = wiring.Manifest.model_validate_json(record_of("codex").read_text(encoding="utf-8"))
    record_of("codex").write_text(record.model_copy(update={"block_sha256": wiring.sha256(marked.body(older))})
                                  .model_dump_json(), encoding="utf-8")
    assert codex.install().paths == [str(config)]
    assert config.read_bytes() == once[0]
    codex.uninstall()
    assert config.read_bytes() == USER_CONFIG.encode("utf-8")


@pytest.mark.parametrize("text, says", [
    (USER_CONFIG + '\n\n[mcp_servers.agentdescent]\ncommand = "my-own-build"\n', "of its own"),
    ('model = "o3"\nmcp_servers = { other = { command = "other-server" } }\n', "inline"),
    ('model = "o3\n', "not valid TOML"),
    ('[[mcp_servers]]\nname = "x"\n', r"mcp_servers as an array of tables \(\[\[mcp_servers\]\]\), not the table"),
    ('mcp_servers = "none"\n', "mcp_servers as a string, not the table of servers Codex reads"),
], ids=["own table", "inline table", "broken file", "array of tables", "string"])
def test_a_config_our_table_cannot_join_is_refused_unchanged(home, text, says):
    config = config_with(home, text)
    for force in (False, True):
        with pytest.raises(UserError, match=says):
            codex.install(force=force)
        assert config.read_bytes() == text.encode("utf-8")
        assert not (home / "skills").exists() and not record_of("codex").exists()


def test_a_skill_edited_after_install_survives_uninstall(home):
    config = config_with(home, USER_CONFIG)
    codex.install()
    edited = skill(home).read_text(encoding="utf-8") + "\nMy own note.\n"
    skill(home).write_text(edited, encoding="utf-8")

    changed = codex.uninstall()
    assert changed.paths == [str(config)] and "edited" in changed.message and str(skill(home)) in changed.message
    assert skill(home).read_text(encoding="utf-8") == edited
    assert config.read_bytes() == USER_CONFIG.encode("utf-8")


def test_a_skill_of_the_users_at_our_path_needs_force(home):
    config_with(home, USER_CONFIG)
    skill(home).parent.mkdir(parents=True)
    skill(home).write_text("---\nname: agentdescent\ndescription: mine\n---\n", encoding="utf-8")
    with pytest.raises(UserError, match="--force"):
        codex.install()
    assert config_with(home, USER_CONFIG).read_bytes() == USER_CONFIG.encode("utf-8")

    said = codex.install(force=True).message
    assert skill(home).read_text(encoding="utf-8") == bundle.files("codex")["skills/agentdescent/SKILL.md"]
    kept = skill(home).with_name("SKILL.md.before-agentdescent")
    assert f"kept your {skill(home)} as {kept}" in said and "description: mine" in kept.read_text(encoding="utf-8")
    assert f"put your own {skill(home)} back" in codex.uninstall().message
    assert "description: mine" in skill(home).read_text(encoding="utf-8") and not kept.exists()


def test_two_codex_homes_are_two_installs_and_each_uninstall_takes_out_its_own(tmp_path, monkeypatch):
    homes = [tmp_path / "a", tmp_path / "b"]
    for codex_home in homes:
        monkeypatch.setenv("CODEX_HOME", str(codex_home))
        codex.install()
    monkeypatch.setenv("CODEX_HOME", str(homes[0]))
    assert str(homes[0] / "config.toml") in codex.uninstall().message
    assert not homes[0].exists() and "agentdescent" in (homes[1] / "config.toml").read_text(encoding="utf-8")
    monkeypatch.setenv("CODEX_HOME", str(homes[1]))
    codex.uninstall()
    assert not homes[1].exists()


def test_without_a_config_install_creates_one_and_uninstall_removes_it(home):
    codex.install()
    assert tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))["mcp_servers"]["agentdescent"]
    codex.uninstall()
    assert not home.exists()  # CODEX_HOME too: install made it


def test_a_symlinked_config_stays_a_link(home, tmp_path):
    dotfiles = tmp_path / "dotfiles" / "codex.toml"
    dotfiles.parent.mkdir()
    dotfiles.write_text(USER_CONFIG, encoding="utf-8")
    home.mkdir()
    (home / "config.toml").symlink_to(dotfiles)
    codex.install()
    assert (home / "config.toml").is_symlink() and marked.present(dotfiles.read_text(encoding="utf-8"))
    codex.uninstall()
    assert (home / "config.toml").is_symlink() and dotfiles.read_bytes() == USER_CONFIG.encode("utf-8")


def test_report_says_how_codex_stands_and_never_fails(home):
    assert not codex.report().wired and codex.report().how.endswith("agentdescent install codex")
    config_with(home, '[mcp_servers.agentdescent]\ncommand = "agentdescent-mcp"\n')
    assert codex.report().wired and "by hand" in codex.report().how
    config_with(home, "[[[ not toml")
    assert not codex.report().wired


def cli(*args: str, home: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return without_hosts(*args, tmp_path=tmp_path, home=home, CODEX_HOME=str(tmp_path / "codex"))


def test_install_refuses_without_codex_and_uninstall_with_another_home_takes_everything_out(home, tmp_path):
    refused = cli("install", "codex", home="first", tmp_path=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    said = refused.stderr.replace("\n", " ")
    assert "`codex` is not on PATH, so nothing was wired" in said and "npm install -g @openai/codex" in said
    assert "agentdescent install codex --without-cli" in said and not home.exists()
    wired = cli("install", "codex", "--without-cli", home="first", tmp_path=tmp_path)
    assert wired.returncode == 0, wired.stderr
    assert "warning: agentdescent-mcp and agentdescent-hook are not on PATH" in wired.stdout  # /usr/bin:/bin has neither
    again = cli("install", "codex", home="first", tmp_path=tmp_path).stderr.replace("\n", " ")
    assert "nothing was changed, and none needs to be: wired in" in again and "nothing was wired" not in again
    assert skill(home).exists() and any((tmp_path / "first" / "hosts").glob("codex-*.json"))
    named = marked.recorded((home / "config.toml").read_text(encoding="utf-8"))
    assert named == str(next((tmp_path / "first" / "hosts").glob("codex-*.json")))
    gone = cli("uninstall", "codex", home="second", tmp_path=tmp_path)  # another AGENTDESCENT_HOME
    assert gone.returncode == 0, gone.stderr
    assert not home.exists()  # the config install made, the skill
    assert [p.suffix for p in (tmp_path / "first" / "hosts").iterdir()] == [".lock"]  # the record gone, its lock left


def test_with_no_record_anywhere_uninstall_takes_out_the_block_and_the_skill_as_shipped(home, tmp_path):
    config = config_with(home, USER_CONFIG)
    codex.install()
    record_of("codex").unlink()  # the home it was installed with is gone
    assert "removed " + str(skill(home)) in codex.uninstall().message
    assert config.read_bytes() == USER_CONFIG.encode("utf-8") and not skill(home).parent.exists()
    codex.install()
    record_of("codex").unlink()
    skill(home).write_text("my own notes\n", encoding="utf-8")
    assert "left " + str(skill(home)) + ": it is not the file this package ships" in codex.uninstall().message
    assert skill(home).read_text(encoding="utf-8") == "my own notes\n"


# The real Codex CLI, on what install wrote.

def codex_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment Codex runs in: the test's CODEX_HOME, HOME and run store, our entry point on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "CODEX_HOME": str(home), "NO_COLOR": "1", **extra}


class AppServer:
    """`codex app-server` over stdio: JSON-RPC requests and notifications, one JSON object a line."""

    def __init__(self, binary: Path, env: dict[str, str], cwd: Path) -> None:
        self.log = cwd / "app-server.log"  # a file, not a pipe: nobody reads a pipe while codex writes to it
        with self.log.open("w", encoding="utf-8") as log:
            self.proc = subprocess.Popen([str(binary), "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, text=True, encoding="utf-8", env=env, cwd=cwd)
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self._ids = iter(range(1, 10**6))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.inbox.put(json.loads(line))

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def request(self, method: str, params: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """The result of `method`; fails the test on an error answer."""
        number = next(self._ids)
        self._send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{method}: no answer in {timeout:g} s; stderr: {self._stderr()}") from None
            if message.get("id") == number and "method" not in message:
                assert "error" not in message, f"{method} failed: {message['error']}"
                return message["result"]
            assert "id" not in message, f"codex asked something the test does not answer: {message}"
            self.notifications.append(message)

    def _send(self, message: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def _stderr(self) -> str:
        self.close()
        return self.log.read_text(encoding="utf-8", errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            close_and_wait(self.proc, timeout=10)


def test_codex_app_server_lists_our_tools_and_skill_and_calls_plan(service, home, tmp_path, no_provider_env):
    binary = host_bin("codex")
    config_with(home, codex_config("http://127.0.0.1:9"))  # no model request is made: nothing listens there
    codex.install()
    server = AppServer(binary, codex_env(home), cwd=tmp_path)
    try:
        server.request("initialize", {"clientInfo": {"name": "agentdescent-tests", "version": "0"}})
        server.notify("initialized")
        listed = server.request("mcpServerStatus/list", {})
        ours = next((s for s in listed["data"] if s["name"] == "agentdescent"), None)
        assert ours is not None, f"no agentdescent server in {[s['name'] for s in listed['data']]}"
        assert set(ours["tools"]) == TOOLS and ours["serverInfo"]["name"] == "agentdescent"

        skills = server.request("skills/list", {"cwds": [str(tmp_path)], "forceReload": True})["data"][0]["skills"]
        assert {"name": "agentdescent", "scope": "user", "path": str(skill(home))} in [
            {k: s[k] for k in ("name", "scope", "path")} for s in skills]

        # the server works in the thread's folder, where the spec's python: refs import from
        thread = server.request("thread/start", {"cwd": str(REPO), "ephemeral": True})["thread"]["id"]
        spec = keyword_domain.spec(tmp_path, price_per_call=0.01)
        plan = server.request("mcpServer/tool/call", {"server": "agentdescent", "threadId": thread, "tool": "plan",
                                                      "arguments": {"spec": spec}}, timeout=120)
        assert not plan.get("isError"), plan["content"]
        quote = plan["structuredContent"]["quote"]
        assert plan["structuredContent"]["tasks"] == len(keyword_domain.tasks())
        assert 0 < quote["calls_low"] <= quote["calls_high"] and quote["cost_high_usd"] > 0

        # Codex scrubs the environment: AGENTDESCENT_HOME reaches the server through env_vars
        runs = server.request("mcpServer/tool/call", {"server": "agentdescent", "threadId": thread, "tool": "runs",
                                                      "arguments": {}})
        assert runs["structuredContent"]["store"] == str(service.store.root)
        # and CODEX_HOME, which is not ~/.codex here: the server sees Codex wired where this session reads it
        doctor = server.request("mcpServer/tool/call", {"server": "agentdescent", "threadId": thread, "tool": "doctor",
                                                        "arguments": {}})
        [seen] = [h for h in doctor["structuredContent"]["hosts"] if h["host"] == "codex"]
        assert seen["wired"] and seen["config"] == str(home / "config.toml"), seen
    finally:
        server.close()


def test_codex_lists_a_written_back_skill_once_and_never_its_backup(home, tmp_path):
    """Codex reads every SKILL.md under a project's .agents/skills, however deep, but skips hidden
    folders: a write-back's backup (.support-router.bak-1/support-router/SKILL.md) is not a second skill."""
    binary = host_bin("codex")
    project = tmp_path / "project"
    skill = project / ".agents" / "skills" / "support-router"
    shutil.copytree(REPO / "examples/skills/support-router", skill)
    subprocess.run(["git", "init", "--quiet", str(project)], check=True, timeout=30)
    evolved = {p.relative_to(skill).as_posix(): p.read_text(encoding="utf-8") for p in skill.rglob("*") if p.is_file()}
    evolved["routing/billing.md"] += "refund\n"
    plan = result_of(evolved, evolved).write_to(skill)
    assert plan.written == ("routing/billing.md",) and (plan.backup / "SKILL.md").is_file()
    config_with(home, codex_config("http://127.0.0.1:9"))  # no model request is made: nothing listens there
    server = AppServer(binary, codex_env(home), cwd=tmp_path)
    try:
        server.request("initialize", {"clientInfo": {"name": "agentdescent-tests", "version": "0"}})
        server.notify("initialized")
        listed = server.request("skills/list", {"cwds": [str(project)], "forceReload": True})["data"][0]["skills"]
    finally:
        server.close()
    paths = [s["path"] for s in listed if s["name"] == "support-router"]
    assert paths == [str(skill / "SKILL.md")], paths


def test_codex_exec_evolves_a_skill_through_our_tools_end_to_end(service, home, tmp_path, no_provider_env):
    binary = host_bin("codex")
    target = tmp_path / "support-router"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    before = files_of(target)
    spec = demo_spec(target)
    seen: dict[str, Any] = {}

    def script(turn: Turn):
        seen.setdefault("skill offered", f"- agentdescent: {SKILL_SAYS}" in turn.texts())  # Codex's list of skills
        started = turn.results("evolve")
        if not started:
            return turn.use("evolve", spec=spec)
        run_id = started[-1].value["run_id"]
        if not turn.results("show"):
            statuses = turn.results("status")
            if statuses and statuses[-1].value["state"] in ENDED:
                return turn.use("show", run_id=run_id)
            assert len(statuses) < 400, f"the run did not end: {statuses[-1].text}"
            if statuses:
                time.sleep(0.2)  # poll the way the skill says, only faster
            return turn.use("status", run_id=run_id)
        if not turn.results("accept"):
            seen["shown"] = turn.results("show")[-1].value
            seen["on disk at show"] = files_of(target)
            return turn.use("accept", run_id=run_id)
        seen["accepted"] = turn.results("accept")[-1].value
        return f"Accepted: the previous version is backed up at {seen['accepted']['backup']}."

    model = ScriptedModel(script, namespace="mcp__agentdescent")
    with LoopbackServer(model) as loopback:
        config_with(home, codex_config(loopback.url))
        codex.install()
        # headless, Codex asks nobody: a tool that is not read-only (evolve, accept) needs the user's
        # approval given beforehand, here on the command line, as a user running `codex exec` would
        done = subprocess.run([str(binary), "exec", "--skip-git-repo-check", "--json", "-c", APPROVED,
                               "Improve the support-router skill with AgentDescent, then accept the change."],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, encoding="utf-8",
                              env=codex_env(home, LOOPBACK_API_KEY="unused"), cwd=REPO, timeout=300)
    assert not model.errors and not loopback.errors, (model.errors + loopback.errors, model.turns[-1].history[-1:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    calls = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "mcp_tool_call"]
    assert {c["tool"] for c in calls} >= {"evolve", "status", "show", "accept"}
    assert all(c["server"] == "agentdescent" and c["status"] == "completed" and not c["error"] for c in calls), calls
    assert seen["skill offered"], "the skill install wrote did not reach the model"

    run_id = seen["accepted"]["run_id"]
    assert service.status(run_id).state == "accepted"
    assert seen["shown"]["diff"].strip() and seen["shown"]["diff"] == service.show(run_id).diff
    assert seen["on disk at show"] == before  # nothing written back before accept
    after = files_of(target)
    assert after != before and set(after) >= set(seen["accepted"]["written"])
    backup = Path(seen["accepted"]["backup"])  # .support-router.bak-1/support-router, beside the skill
    assert backup.parent.parent == target.parent and backup.parent.name.startswith(f".{target.name}.bak-")
    assert files_of(backup) == before


def files_of(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*")) if p.is_file()}


# What users' files and hosts do to an install.

def test_a_config_copied_to_another_codex_home_is_uninstalled_there_and_only_there(tmp_path, monkeypatch):
    """Its block names the first home's record: that record is not this install's."""
    first, second = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("CODEX_HOME", str(first))
    codex.install()
    second.mkdir()
    shutil.copy(first / "config.toml", second / "config.toml")
    monkeypatch.setenv("CODEX_HOME", str(second))
    said = codex.uninstall().message
    assert f"took our block out of {second / 'config.toml'}" in said and str(first) not in said
    assert not marked.present((second / "config.toml").read_text(encoding="utf-8"))
    monkeypatch.setenv("CODEX_HOME", str(first))
    assert skill(first).exists() and codex.report().wired and record_of("codex").exists()


def test_uninstall_says_so_when_codex_rewrote_the_file_and_our_server_is_still_wired(home):
    config = config_with(home, USER_CONFIG)
    codex.install()
    rewritten = config.read_text(encoding="utf-8").replace(marked.recorded(config.read_text(encoding="utf-8")), "")
    config.write_text("\n".join(line for line in rewritten.splitlines() if not line.startswith("# >>>")) + "\n",
                      encoding="utf-8")  # as `codex mcp add` leaves it: our first marker line gone
    said = codex.uninstall().message
    assert "still wires our MCP server outside our markers" in said and "`codex mcp remove agentdescent`" in said


@pytest.mark.parametrize("blocked", ["skills", "record"])
def test_a_failed_install_changes_nothing(home, tmp_path, monkeypatch, blocked):
    config = config_with(home, USER_CONFIG)
    if blocked == "skills":
        (home / "skills").write_text("a file where a folder goes\n", encoding="utf-8")
    else:
        monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "home-file"))
        (tmp_path / "home-file").write_text("not a folder\n", encoding="utf-8")
    with pytest.raises(UserError, match="could not install for codex: .*nothing was changed"):
        codex.install()
    assert config.read_bytes() == USER_CONFIG.encode("utf-8") and not skill(home).exists()
    assert not codex.report().wired


def test_a_config_with_a_byte_order_mark_is_wired_and_given_back(home):
    config = config_with(home, "\ufeff" + USER_CONFIG)
    codex.install()
    assert codex.report().wired
    codex.uninstall()
    assert config.read_bytes() == ("\ufeff" + USER_CONFIG).encode("utf-8")


def test_a_reinstall_keeps_an_edited_block_unless_forced(home):
    config = config_with(home, USER_CONFIG)
    codex.install()
    mine = config.read_text(encoding="utf-8").replace("tool_timeout_sec = 120", "tool_timeout_sec = 900")
    config.write_text(mine, encoding="utf-8")
    for _ in range(2):  # and again: the record still knows the block install wrote
        again = codex.install()
        assert "left our block in" in again.message and "--force" in again.message
        assert config.read_text(encoding="utf-8") == mine
    codex.install(force=True)
    assert "tool_timeout_sec = 120" in config.read_text(encoding="utf-8")


def test_a_skill_of_the_users_that_is_a_link_is_put_back_a_link(home, tmp_path):
    dotfiles = tmp_path / "dotfiles" / "SKILL.md"
    dotfiles.parent.mkdir()
    dotfiles.write_text("---\nname: agentdescent\ndescription: mine\n---\n", encoding="utf-8")
    skill(home).parent.mkdir(parents=True)
    skill(home).symlink_to(dotfiles)
    codex.install(force=True)
    assert not skill(home).is_symlink() and dotfiles.read_text(encoding="utf-8").endswith("---\n")
    codex.uninstall()
    assert skill(home).is_symlink() and skill(home).resolve() == dotfiles


def test_a_dangling_link_for_the_config_is_refused(home, tmp_path):
    home.mkdir()
    (home / "config.toml").symlink_to(tmp_path / "dotfiles" / "missing" / "codex.toml")
    with pytest.raises(UserError, match="which does not exist"):
        codex.install()
    assert not (tmp_path / "dotfiles").exists()


def test_a_config_that_is_a_fifo_or_a_device_is_refused_at_once_by_doctor_and_install(home):
    """doctor and install waited on a FIFO for good, and read /dev/zero until memory ran out."""
    from agentdescent.runs.doctor import doctor

    home.mkdir()
    os.mkfifo(home / "config.toml")
    assert any("codex: " in p and "is a FIFO, not a regular file" in p for p in doctor().problems)
    with pytest.raises(UserError, match="is a FIFO, not a regular file"):
        codex.install()
    (home / "config.toml").unlink()
    (home / "config.toml").symlink_to("/dev/zero")
    with pytest.raises(UserError, match="is under /dev"):
        codex.install()


def test_doctor_names_a_broken_config_and_a_server_the_host_cannot_start(home, monkeypatch):
    from agentdescent.runs.doctor import doctor

    config_with(home, "[[[ not toml")
    assert any("codex: " in p and "is not valid TOML" in p for p in doctor().problems)
    config_with(home, USER_CONFIG)
    codex.install()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert any("codex wired, but agentdescent-mcp" in p and "not on PATH" in p for p in doctor().problems)


def test_a_crlf_config_gets_a_crlf_block_and_one_made_crlf_since_still_comes_out_whole(home, tmp_path, monkeypatch):
    crlf = USER_CONFIG.replace("\n", "\r\n")
    config = config_with(home, crlf)
    codex.install()
    assert b"\r\n[mcp_servers.agentdescent]\r\n" in config.read_bytes()
    codex.uninstall()
    assert config.read_bytes() == crlf.encode("utf-8")
    config_with(home, USER_CONFIG)
    codex.install()
    config.write_bytes(config.read_bytes().replace(b"\n", b"\r\n"))  # git's autocrlf, say
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "another-home"))  # the block's record is found by its name
    assert "took our block out" in codex.uninstall().message
    assert config.read_bytes() == crlf.encode("utf-8") and not record_of("codex").exists()
