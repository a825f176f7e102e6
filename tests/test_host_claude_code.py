"""Claude Code, the real CLI (the pinned 2.1.332), offline, in a throwaway HOME: the plugin and the
marketplace validate; they install from the repository and from the package alone (`agentdescent
install claude-code`) and the server connects; the SessionStart hook names live runs; and a
scripted model on loopback (`tests.anthropic_stream`) drives runs through `claude -p` end to end,
one that the demo's python: agents do and one that claude itself does (`agent: host`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentdescent.errors import UserError
from agentdescent.hosts import claude_code, claude_replaced
from agentdescent.reflect.reflector import APART
from agentdescent.runs.status import LIVE
from tests import keyword_domain
from tests.anthropic_stream import Chat, ScriptedModel
from tests.host_clis import host_bin
from tests.loopback import LoopbackServer, closed_port_url
from tests.mcp_support import REPO, demo_spec, text_spec

SERVER = "plugin:agentdescent:agentdescent"  # what `claude mcp get` names a plugin's server
PREFIX = "mcp__plugin_agentdescent_agentdescent__"  # and how its tools reach the model
DUMMY_KEY = "sk-ant-api03-dummy-offline-0000000000000000"
MARKER = "Use AgentDescent"  # in every prompt the tests give claude: what tells the main loop from side requests


@pytest.fixture
def claude() -> Path:
    return host_bin("claude")


@pytest.fixture
def env(tmp_path, service, claude, monkeypatch) -> dict[str, str]:
    """A user who never ran Claude Code: a HOME of their own, the run store of `service`, no key
    but a dummy, and on PATH the venv (agentdescent-mcp, agentdescent-hook), claude and git. This
    process gets the same, for the host module's functions. ANTHROPIC_BASE_URL is a closed port
    on loopback until a session points it at its model: with a key and no base URL, every
    `claude plugin` / `claude mcp` command waits ~17 s offline for the default API host."""
    home = tmp_path / "user"
    home.mkdir()
    path = os.pathsep.join(dict.fromkeys([str(Path(sys.executable).parent), str(claude.parent),
                                          str(Path(shutil.which("git")).parent), "/usr/bin", "/bin"]))
    made = {"HOME": str(home), "PATH": path, "AGENTDESCENT_HOME": str(service.store.root.parent),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "ANTHROPIC_API_KEY": DUMMY_KEY,
            "ANTHROPIC_BASE_URL": closed_port_url(), "TMPDIR": os.environ["TMPDIR"], "LANG": "C.UTF-8"}
    for name in ("CLAUDE_CONFIG_DIR", "OPENAI_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in made.items():
        monkeypatch.setenv(name, value)
    return made


def run(argv: list[str], env: dict[str, str], *, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(argv: list[str], env: dict[str, str], **kwargs) -> str:
    done = run(argv, env, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}: {done.stdout[-1500:]} {done.stderr[-1500:]}"
    return done.stdout


def session(claude: Path, env: dict[str, str], model: ScriptedModel, prompt: str, tools: list[str], *,
            installed: bool = False) -> list[dict]:
    """`claude -p PROMPT` against `model`, with our plugin from the repository (`--plugin-dir`) or, when
    `installed`, as `agentdescent install claude-code` installed it; its stream-json events."""
    plugin = [] if installed else ["--plugin-dir", str(REPO / "plugins/claude-code")]
    text = prompt if prompt.startswith("/") else f"{MARKER}: {prompt}"
    with LoopbackServer(model) as server:
        out = ok([str(claude), "-p", text, *plugin,
                  "--allowedTools", ",".join(PREFIX + tool for tool in tools), "--output-format", "stream-json",
                  "--verbose"], {**env, "ANTHROPIC_BASE_URL": server.url, "MCP_CONNECTION_NONBLOCKING": "false",
                                   "MCP_TIMEOUT": "90000"},  # a loaded machine starts our server slowly
                 timeout=180)
        assert {r.headers.get("x-api-key") for r in server.requests} == {DUMMY_KEY}
    assert model.errors == [], model.errors
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success", events[-1]
    return events


def test_the_plugin_and_the_marketplace_validate_strictly(claude, env):
    plugin = json.loads(ok([str(claude), "plugin", "validate", "--strict", "--json", "plugins/claude-code"], env))
    assert plugin["success"] and plugin["manifest"]["errors"] == plugin["manifest"]["warnings"] == []
    provides = plugin["provides"]
    assert [s["name"] for s in provides["mcpServers"]] == ["agentdescent"]
    assert [(h["event"], h["command"]) for h in provides["hooks"]] == [("SessionStart", "agentdescent-hook session-start")]
    assert provides["skills"] == ["agentdescent:agentdescent"] and provides["commands"] == ["agentdescent:evolve"]
    market = json.loads(ok([str(claude), "plugin", "validate", "--strict", "--json", "."], env))
    assert market["success"] and market["manifest"]["type"] == "marketplace"
    assert market["manifest"]["errors"] == market["manifest"]["warnings"] == []


def test_a_clean_home_installs_the_plugin_from_the_repository_and_its_server_connects(claude, env, tmp_path):
    ok([str(claude), "plugin", "marketplace", "add", str(REPO)], env, cwd=tmp_path)
    ok([str(claude), "plugin", "install", "agentdescent@agentdescent"], env, cwd=tmp_path)
    assert "Connected" in ok([str(claude), "mcp", "get", SERVER], env, cwd=tmp_path)
    listed = {p["id"]: p for p in json.loads(ok([str(claude), "plugin", "list", "--json"], env, cwd=tmp_path))}
    assert listed["agentdescent@agentdescent"]["readFromFolder"] == str(REPO / "plugins/claude-code")
    report = claude_code.report()
    assert report.installed and report.wired and report.version.startswith("2.1.")
    assert str(REPO) in report.how
    with pytest.raises(UserError, match="already added from"):  # a marketplace of the user's own is theirs
        claude_code.install()
    assert "left the marketplace" in claude_code.uninstall().message
    assert "agentdescent@agentdescent" in ok([str(claude), "plugin", "list"], env, cwd=tmp_path)


def test_agentdescent_install_claude_code_wires_a_home_that_never_saw_the_repository(claude, env, tmp_path):
    assert not claude_code.report().wired
    changed = claude_code.install()
    folder = claude_code.folder()
    assert folder.is_relative_to(Path(env["AGENTDESCENT_HOME"])) and not folder.is_relative_to(REPO)
    assert changed.commands == [f"claude plugin marketplace add {folder}", "claude plugin install agentdescent@agentdescent"]
    assert (folder / "plugins/claude-code/skills/agentdescent/SKILL.md").read_text(encoding="utf-8") == \
        (REPO / "skills/agentdescent/SKILL.md").read_text(encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert "Connected" in ok([str(claude), "mcp", "get", SERVER], env, cwd=elsewhere)
    markets = json.loads(ok([str(claude), "plugin", "marketplace", "list", "--json"], env, cwd=elsewhere))
    assert [(m["name"], m["path"]) for m in markets] == [("agentdescent", str(folder))]
    assert claude_code.report().wired

    again = ok(["agentdescent", "install", "claude-code"], env, cwd=elsewhere)  # the CLI verb, on the same install
    assert "already has the plugin" in again
    forced = claude_code.install(force=True)
    assert forced.commands[-1] == "claude plugin update agentdescent@agentdescent"

    gone = claude_code.uninstall()
    assert gone.commands == ["claude plugin uninstall agentdescent@agentdescent", "claude plugin marketplace remove agentdescent"]
    assert not folder.exists() and not claude_code.report().wired
    missing = run([str(claude), "mcp", "get", SERVER], env, cwd=elsewhere)
    assert missing.returncode != 0 and "No MCP server named" in missing.stdout + missing.stderr
    assert "nothing to uninstall" in claude_code.uninstall().message


def test_uninstall_with_another_agentdescent_home_takes_out_the_marketplace_install_laid_out(claude, env, tmp_path):
    first, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    elsewhere.mkdir()
    ok(["agentdescent", "install", "claude-code"], {**env, "AGENTDESCENT_HOME": str(first)}, cwd=elsewhere)
    folder = first / "hosts" / "claude-code-marketplace"
    assert (folder / ".claude-plugin" / "marketplace.json").is_file()
    gone = ok(["agentdescent", "uninstall", "claude-code"], {**env, "AGENTDESCENT_HOME": str(tmp_path / "second")},
              cwd=elsewhere)
    assert "uninstalled the Claude Code plugin agentdescent@agentdescent" in gone and not folder.exists()
    assert json.loads(ok([str(claude), "plugin", "marketplace", "list", "--json"], env, cwd=elsewhere)) == []


def known() -> dict[str, dict]:
    """{name: source} of the marketplaces Claude Code has, as known_marketplaces.json records them."""
    listed = json.loads((claude_code.config_dir() / "plugins" / "known_marketplaces.json").read_text(encoding="utf-8"))
    return {name: entry["source"] for name, entry in listed.items()}


def own_marketplace(claude: Path, env: dict[str, str], where: Path, *, plugin: str | None = None,
                    folder: str = "", version: str = "1.0.0") -> Path:
    """A marketplace of the user's own named agentdescent, added as they would add it; holding
    `plugin` (in plugins/`folder`) where one is named."""
    listed = []
    if plugin is not None:
        (where / "plugins" / folder / ".claude-plugin").mkdir(parents=True)
        (where / "plugins" / folder / ".claude-plugin" / "plugin.json").write_text(json.dumps(
            {"name": plugin, "version": version, "description": "mine"}), encoding="utf-8")
        listed = [{"name": plugin, "source": f"./plugins/{folder}", "description": "mine"}]
    (where / ".claude-plugin").mkdir(parents=True)
    (where / ".claude-plugin" / "marketplace.json").write_text(json.dumps(
        {"name": "agentdescent", "owner": {"name": "me"}, "plugins": listed}), encoding="utf-8")
    ok([str(claude), "plugin", "marketplace", "add", str(where)], env, cwd=where)
    return where


def test_the_arguments_that_add_a_marketplace_again_say_all_of_its_source():
    args = claude_replaced.add_args
    assert args({"source": "github", "repo": "someone/agentdescent"}) == ["someone/agentdescent"]
    assert args({"source": "github", "repo": "o/r", "ref": "v1", "sparsePaths": [".claude-plugin", "plugins"]}) == \
        ["o/r#v1", "--sparse", ".claude-plugin", "plugins"]
    assert args({"source": "git", "url": "https://git.example/o/r.git", "ref": "main"}) == ["https://git.example/o/r.git#main"]
    assert args({"source": "url", "url": "https://example.com/marketplace.json"}) == ["https://example.com/marketplace.json"]
    assert args({"source": "directory", "path": "/srv/m"}) == args({"source": "file", "path": "/srv/m"}) == ["/srv/m"]
    for unsaid in ({"source": "github", "repo": "o/r", "path": "sub/marketplace.json"}, {"source": "npm", "package": "m"},
                   {"source": "url", "url": "https://example.com/m.json", "headers": {"A": "b"}}, {"source": "github"},
                   {"source": ["github"], "repo": "o/r"}, {"source": {"kind": "github"}, "repo": "o/r"}):  # the user's file
        assert args(unsaid) is None, unsaid
    assert claude_replaced.shown({"source": ["github"]}) == '{"source": ["github"]}'


def test_uninstall_puts_back_a_github_marketplace_install_force_replaced_or_says_how(claude, env, tmp_path, monkeypatch):
    for i, prefix in enumerate(["https://github.com/", "git@github.com:"]):  # GitHub unreachable, online or not
        monkeypatch.setenv(f"GIT_CONFIG_KEY_{i}", "url.http://127.0.0.1:9/.insteadOf")
        monkeypatch.setenv(f"GIT_CONFIG_VALUE_{i}", prefix)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "2")
    theirs = {"source": "github", "repo": "someone/agentdescent"}
    listed = claude_code.config_dir() / "plugins" / "known_marketplaces.json"
    listed.parent.mkdir(parents=True)
    listed.write_text(json.dumps({"agentdescent": {"source": theirs, "installLocation": str(tmp_path / "clone"),
                                                   "lastUpdated": "2026-01-01T00:00:00.000Z"}}), encoding="utf-8")
    claude_code.install(force=True)
    gone = claude_code.uninstall()
    assert "your own marketplace 'agentdescent', which install --force had replaced, is not back" in gone.message
    assert "add it again by hand with `claude plugin marketplace add someone/agentdescent`" in gone.message
    assert gone.commands[-1] == "claude plugin marketplace remove agentdescent"
    assert gone.next.startswith("add your marketplace again")


def test_uninstall_under_another_agentdescent_home_puts_back_the_marketplace_install_force_replaced(
        claude, env, tmp_path, monkeypatch):
    mine = own_marketplace(claude, env, tmp_path / "mine")
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "first"))
    claude_code.install(force=True)
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "second"))
    gone = claude_code.uninstall()
    assert gone.commands[-1] == f"claude plugin marketplace add {mine}" and "re-added your own" in gone.message
    assert known() == {"agentdescent": {"source": "directory", "path": str(mine)}}
    assert not (tmp_path / "first" / "hosts" / "claude-code-marketplace").exists()


def test_install_under_another_agentdescent_home_moves_our_marketplace_there_and_never_calls_it_yours(
        claude, env, tmp_path, monkeypatch):
    mine = own_marketplace(claude, env, tmp_path / "mine")
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("AGENTDESCENT_HOME", str(first))
    claude_code.install(force=True)
    monkeypatch.setenv("AGENTDESCENT_HOME", str(second))
    moved = claude_code.install()  # no --force: the marketplace there is ours
    assert moved.commands[-1] == "claude plugin update agentdescent@agentdescent"
    assert known()["agentdescent"]["path"] == str(claude_code.folder())
    assert not (first / "hosts" / "claude-code-marketplace").exists()
    claude_code.install(force=True)  # nor with it
    gone = claude_code.uninstall()
    assert gone.commands[-1] == f"claude plugin marketplace add {mine}"  # the user's own, not the first home's
    assert known() == {"agentdescent": {"source": "directory", "path": str(mine)}}


def test_a_second_install_at_once_waits_and_leaves_the_files_the_first_is_writing_alone(claude, env, monkeypatch):
    written, second = claude_code.atomic.write_text, []

    def slow_write(path, text):  # the first write pauses with its temp file in the folder
        if not second:
            in_flight = Path(path).parent / f".{Path(path).name[:32]}.0123abcd.tmp"
            in_flight.parent.mkdir(parents=True, exist_ok=True)
            in_flight.write_text(text, encoding="utf-8")
            second.append(subprocess.Popen([sys.executable, "-m", "agentdescent", "install", "claude-code"], cwd=REPO,
                                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            with contextlib.suppress(subprocess.TimeoutExpired):
                second[0].wait(timeout=5)
            assert in_flight.is_file(), "the second install deleted a file the first one was writing"
            in_flight.unlink()
        written(path, text)

    monkeypatch.setattr(claude_code.atomic, "write_text", slow_write)
    assert claude_code.install().commands[-1] == "claude plugin install agentdescent@agentdescent"
    out, _ = second[0].communicate(timeout=120)
    assert second[0].returncode == 0 and "Traceback" not in out and "already has the plugin" in out, out


def test_a_failed_install_leaves_no_marketplace_pointing_at_the_folder_it_removed(claude, env, tmp_path):
    settings = claude_code.config_dir() / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{\n  // mine\n  "theme": "dark"\n}\n', encoding="utf-8")
    with pytest.raises(UserError, match="Invalid JSON syntax in settings file"):
        claude_code.install()
    assert not claude_code.folder().exists()
    assert "agentdescent" not in known()
    assert settings.read_text(encoding="utf-8").startswith('{\n  // mine')


def test_install_says_what_to_do_when_claude_is_missing_or_fails(service, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(UserError, match="npm install -g @anthropic-ai/claude-code"):
        claude_code.install()
    assert not claude_code.folder().exists()  # refused before anything was written
    assert not claude_code.report().installed
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "claude").write_text("#!/bin/sh\necho 'Error: the marketplace file is not readable' >&2\nexit 3\n", encoding="utf-8")
    (fake / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    with pytest.raises(UserError, match=r"claude plugin marketplace add .* failed \(exit 3\): Error: the marketplace file"):
        claude_code.install()
    assert not claude_code.folder().exists()  # a first install that failed leaves no folder behind


def test_the_session_start_hook_names_live_runs_and_says_nothing_without(claude, env, service, tmp_path):
    hook = ["agentdescent-hook", "session-start"]
    assert ok(hook, env) == ""
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer the question.\n", encoding="utf-8")
    run_id = service.start(text_spec(prompt, agent="host", reflector="host")).run_id  # waits on a host: stays live
    deadline = time.monotonic() + 60
    while not (lines := ok(hook, env).splitlines()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(lines) == 1 and run_id in lines[0] and str(prompt) in lines[0], lines

    model = ScriptedModel(lambda chat: "Noted.", prefix=PREFIX, marker=MARKER)
    events = session(claude, env, model, "hello", [])
    hooks = [e for e in events if e.get("type") == "system" and e.get("subtype") == "hook_response"]
    assert [(e["hook_event"], e["exit_code"]) for e in hooks] == [("SessionStart", 0)]
    assert run_id in hooks[0]["stdout"]
    assert any(run_id in json.dumps(chat.body["messages"]) for chat in model.chats)  # the model was told
    assert service.status(run_id).state in LIVE


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_model_in_claude_evolves_a_skill_shows_the_diff_and_accepts_it(claude, env, service, tmp_path):
    target = tmp_path / "support-router"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    original = snapshot(target)
    spec = demo_spec(target)
    seen: dict[str, dict[str, bytes]] = {}

    def script(chat: Chat):
        for result in chat.history:
            assert not result.is_error, f"{result.name} failed: {result.text}"
        if not chat.results("evolve"):
            return chat.use("evolve", spec=spec)
        run_id = chat.results("evolve")[-1].value["run_id"]
        if chat.results("accept"):
            return f"Written back; the backup is {chat.results('accept')[-1].value['backup']}."
        if chat.results("show"):
            seen.setdefault("at_show", snapshot(target))  # the diff is with the model; nothing written yet
            return chat.use("accept", run_id=run_id)
        statuses = chat.results("status")
        state = statuses[-1].value["state"] if statuses else "starting"
        if state == "finished":
            return chat.use("show", run_id=run_id)
        assert state in LIVE, statuses[-1].text
        if statuses:
            time.sleep(0.2)  # a model polls sparingly
        return chat.use("status", run_id=run_id)

    model = ScriptedModel(script, prefix=PREFIX, marker=MARKER)
    session(claude, env, model, f"evolve the skill in {target}", ["evolve", "status", "show", "accept"])

    [summary] = service.runs()
    status = service.status(summary.id)
    assert status.state == "accepted" and status.round >= 1, status
    shown = [chat.results("show") for chat in model.chats if chat.results("show")][0][-1].value
    assert shown["diff"].strip() and shown["diff"] == service.show(summary.id).diff
    assert seen["at_show"] == original
    after = snapshot(target)
    assert after != original and set(shown["files_changed"]) <= set(after)
    backup = Path(model.chats[-1].results("accept")[-1].value["backup"])  # .<name>.bak-N/<name>, beside the target
    assert backup.parent.parent == target.parent and backup.parent.name.startswith(f".{target.name}.bak-")
    assert snapshot(backup) == original


def test_claude_itself_does_a_host_driven_run_to_a_perfect_reward(claude, env, service, tmp_path):
    """As the README has a user do it: `agentdescent install claude-code`, then `/agentdescent:evolve`
    in a session; the scripted model (which, as claude, is the run's worker) follows the command."""
    claude_code.install()
    tasks = [{"id": f"t{i:02d}", "prompt": f"request {i} (code k0)", "gold": "k0"} for i in range(10)]
    spec = keyword_domain.spec(tmp_path, tasks=tasks, agent="host", reflector="host", rounds=3, host_timeout=120)
    answered, texts = {"rollout": 0, "proposal": 0}, {}

    def script(chat: Chat):
        for result in chat.history:
            assert not result.is_error, f"{result.name} failed: {result.text}"
        if not chat.results("evolve"):
            return chat.use("evolve", spec=spec)
        run_id = chat.results("evolve")[-1].value["run_id"]
        if chat.results("status"):
            return f"The run is {chat.results('status')[-1].value['state']}."
        last = [r for r in chat.last() if r.name == PREFIX + "host_next"]
        answers = []
        for result in last:
            for group in result.value["work"]:
                texts.setdefault(group["candidate"], group.get("context"))  # the artifact, the first time
                for request in group["requests"]:
                    kind, text = group["kind"], texts[group["candidate"]]
                    answer = (keyword_domain.answer(f"{text}\n\n{request['prompt']}") if kind == "rollout" else
                              keyword_domain.next_rule(request["prompt"].replace(APART, text)))  # as host_next says
                    answered[kind] += 1
                    answers.append({"request_id": request["request_id"], "answer": answer})
        if any(not r.value["running"] for r in last):
            return chat.use("status", run_id=run_id)
        following = chat.use("host_next", run_id=run_id, wait=5)
        return [chat.use("host_submit", run_id=run_id, answers=answers), following] if answers else following

    model = ScriptedModel(script, prefix=PREFIX, marker="Evolve with AgentDescent, following the agentdescent skill")
    tools = ["evolve", "status", "host_next", "host_submit"]
    session(claude, env, model, f"/agentdescent:evolve {spec['target']}", tools, installed=True)
    assert f"What the user named: `{spec['target']}`" in json.dumps(model.chats[0].body["messages"])  # expanded

    [summary] = service.runs()
    status = service.status(summary.id)
    assert status.state == "finished" and status.best_reward == 1.0 and status.initial_reward < 1.0, status
    assert answered["rollout"] > 0 and answered["proposal"] > 0
    assert "OPENAI_API_KEY" not in env and env["ANTHROPIC_API_KEY"] == DUMMY_KEY
    stored = b"".join(p.read_bytes() for p in service.store.get(summary.id).path.rglob("*") if p.is_file())
    assert DUMMY_KEY.encode() not in stored


def test_a_disabled_plugin_is_reported_with_the_command_that_enables_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    plugins = tmp_path / "claude" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / "installed_plugins.json").write_text(json.dumps({"plugins": {"agentdescent@agentdescent": [{}]}}))
    (tmp_path / "claude" / "settings.json").write_text(json.dumps({"enabledPlugins": {"agentdescent@agentdescent": False}}))
    report = claude_code.report()
    assert not report.wired and "claude plugin enable agentdescent@agentdescent" in report.how


def test_uninstall_installs_again_the_plugins_of_the_users_marketplace_that_install_force_replaced(
        claude, env, tmp_path):
    """Replacing the marketplace uninstalled its plugins, and uninstall put back only the marketplace."""
    own_marketplace(claude, env, tmp_path / "mine", plugin="mytool", folder="mytool")
    ok([str(claude), "plugin", "install", "mytool@agentdescent"], env, cwd=tmp_path)
    claude_code.install(force=True)
    gone = claude_code.uninstall()
    assert "installed again its plugins mytool@agentdescent" in gone.message
    assert gone.commands[-1] == "claude plugin install mytool@agentdescent"
    installed = json.loads((claude_code.config_dir() / "plugins" / "installed_plugins.json").read_text(encoding="utf-8"))
    assert "mytool@agentdescent" in installed["plugins"]


def test_uninstall_installs_again_the_users_own_plugin_of_our_name_that_install_force_replaced(claude, env, tmp_path):
    """The user's clone of this repository, added as their marketplace, with its plugin installed."""
    mine = own_marketplace(claude, env, tmp_path / "mine", plugin="agentdescent", folder="claude-code", version="9.9.9")
    ok([str(claude), "plugin", "install", "agentdescent@agentdescent"], env, cwd=tmp_path)
    claude_code.install(force=True)
    gone = claude_code.uninstall()
    assert "installed again its plugins agentdescent@agentdescent" in gone.message, gone.message
    assert gone.commands[-1] == "claude plugin install agentdescent@agentdescent"
    installed = json.loads((claude_code.config_dir() / "plugins" / "installed_plugins.json").read_text(encoding="utf-8"))
    assert [entry["version"] for entry in installed["plugins"]["agentdescent@agentdescent"]] == ["9.9.9"]
    assert known() == {"agentdescent": {"source": "directory", "path": str(mine)}}


def test_uninstall_keeps_the_values_of_the_users_settings_and_its_help_says_their_file_is_rewritten(claude, env):
    settings = claude_code.config_dir() / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = '{\n    "theme": "dark",\n    "alwaysThinkingEnabled": false,\n  "permissions": {"allow": ["Bash(ls:*)"]}\n}\n'
    settings.write_text(mine, encoding="utf-8")
    claude_code.install()
    claude_code.uninstall()
    after = json.loads(settings.read_text(encoding="utf-8"))
    assert {key: after[key] for key in json.loads(mine)} == json.loads(mine)  # the values, not the layout
    assert {key: value for key, value in after.items() if key not in json.loads(mine)} in (
        {}, {"enabledPlugins": {}, "extraKnownMarketplaces": {}}, {"extraKnownMarketplaces": {}})
    said = " ".join(ok([sys.executable, "-m", "agentdescent", "uninstall", "--help"], env).split())
    assert "stay as they are" not in said and "rewrite its settings.json" in said
