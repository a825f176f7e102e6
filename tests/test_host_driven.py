"""A host-driven run through the real Claude Code (the pinned CLI), offline: the command's text as
the model receives it, the two helpers SKILL.md starts doing the run's work within the hosts'
limits, blind to the tasks' answers and within the cost target, the permission setting a headless
run of it needs, and work a conversation took when it ended going back to the queue at once; and
through the real Codex, the same two helpers started as its sub-agents, as blind. The scripted
models are `bench/host_models.py`'s, which follow SKILL.md."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentdescent.runs import Service
from tests.anthropic_stream import Chat, ScriptedModel
from tests.host_clis import host_bin
from tests.loopback import LoopbackServer

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("host_cost", REPO / "bench" / "host_cost.py")
host_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_cost)
host_models = importlib.import_module("host_models")  # the scripted hosts, beside it (host_cost put bench/ on the path)
PREFIX = host_models.PREFIX
EVERY_TOOL = "mcp__plugin_agentdescent_agentdescent__*"  # the setting docs/hosts.md gives a headless session


@pytest.fixture
def claude() -> Path:
    return host_bin("claude")


@pytest.fixture
def home(tmp_path, claude, monkeypatch) -> dict[str, str]:
    """A user who never ran Claude Code: a HOME, a run store and a dummy key of the test's own."""
    env = {"HOME": str(tmp_path / "user"), "AGENTDESCENT_HOME": str(tmp_path / "store"), "LANG": "C.UTF-8",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(claude.parent), "/usr/bin", "/bin"]),
           "ANTHROPIC_API_KEY": "sk-ant-api03-offline-test-0000", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "MCP_CONNECTION_NONBLOCKING": "false", "MCP_TIMEOUT": "90000",  # a loaded machine starts our server slowly
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    Path(env["HOME"]).mkdir()
    monkeypatch.setenv("AGENTDESCENT_HOME", env["AGENTDESCENT_HOME"])
    return env


def session(claude: Path, env: dict, model, prompt: str, cwd: Path, allowed: str) -> subprocess.CompletedProcess:
    with LoopbackServer(model) as server:
        return subprocess.run([str(claude), "-p", prompt, "--plugin-dir", str(REPO / "plugins/claude-code"),
                               "--allowedTools", allowed, "--output-format", "stream-json", "--verbose"], cwd=cwd,
                              env={**env, "ANTHROPIC_BASE_URL": server.url}, capture_output=True, text=True, timeout=600)


def first_text(model) -> str:
    """The user's message as the model first received it: the command, expanded."""
    content = model.chats[0].body["messages"][0]["content"] if model.chats else []
    return "".join(part.get("text", "") for part in content) if isinstance(content, list) else str(content)


@pytest.mark.parametrize("with_tasks", [True, False])
def test_the_command_names_the_target_and_the_tasks_file_as_the_model_receives_it(claude, home, tmp_path, with_tasks):
    target, tasks = tmp_path / "my-skill", tmp_path / "my-tasks.jsonl"
    model = ScriptedModel(lambda chat: "Understood.", prefix=PREFIX, marker="Evolve with AgentDescent")
    arguments = f"{target} {tasks}" if with_tasks else str(target)
    done = session(claude, home, model, f"/agentdescent:evolve {arguments}", tmp_path, EVERY_TOOL)
    assert done.returncode == 0, done.stderr[-1500:]
    text = first_text(model)
    assert f"What the user named: `{arguments}`" in text
    assert "$1" not in text and "$0" not in text and "$ARGUMENTS" not in text


def test_the_helpers_do_a_host_driven_run_blind_within_the_hosts_limits_and_the_cost_target(claude, home, tmp_path):
    """The benchmark's run (36 tasks, 2 workers, 4 rounds) at one seed of the stand-in reflector:
    at most 30 model requests and 1.5M input tokens for a held-out reward of 0.9 or more. Requests
    vary by a few with the machine's load (a wave the run posts slowly comes in two pages), so the
    seed is one with room under the target on a loaded machine."""
    target, tasks, spec = host_cost.setup(tmp_path, 36, 2, 4)
    host = host_models.ClaudeHost(spec, (REPO / "skills/agentdescent/SKILL.md").read_text(encoding="utf-8"), seed=4)
    done = session(claude, home, host, f"/agentdescent:evolve {target} {tasks}", tmp_path, EVERY_TOOL)
    assert done.returncode == 0 and host.errors == [], (host.errors, done.stderr[-1500:])
    [summary] = Service().runs()
    status = Service().status(summary.id)
    assert status.state == "finished" and status.best_reward >= 0.9 > status.initial_reward, status
    assert host.requests[host_models.ROLLOUTS] > 0 and host.requests[host_models.REFLECTIONS] > 0
    assert sum(host.requests.values()) <= 30 and sum(host.tokens.values()) <= 1_500_000, (host.requests, host.tokens)
    assert host.results and max(host.results) < 8_000  # every answer under what the hosts show whole
    rollout_helper, reflection_helper = host.seen[host_models.ROLLOUTS], host.seen[host_models.REFLECTIONS]
    assert "<expected>" in reflection_helper[-1] and not any("<expected>" in text for text in rollout_helper)
    assert not any('\\"team\\":' in text or "tasks.jsonl" in text for text in rollout_helper)  # nor the tasks file


def test_codex_starts_the_same_helpers_as_sub_agents_and_its_rollouts_are_blind(tmp_path, monkeypatch):
    """Codex tells its model to spawn sub-agents only where a skill explicitly asks: SKILL.md does,
    and a sub-agent Codex spawns starts from its prompt alone, so the rollout helper never sees the
    tasks' answers nor the user's request (which names the tasks file)."""
    codex = host_bin("codex")
    target, tasks, spec = host_cost.setup(tmp_path, 12, 2, 1)
    host = host_models.CodexHost(spec, (REPO / "skills/agentdescent/SKILL.md").read_text(encoding="utf-8"), seed=0)
    for name, folder in (("CODEX_HOME", "codex"), ("AGENTDESCENT_HOME", "store")):  # through_codex sets them
        monkeypatch.setenv(name, str(tmp_path / folder))
    (tmp_path / "user").mkdir()
    env = {"HOME": str(tmp_path / "user"), "AGENTDESCENT_HOME": str(tmp_path / "store"), "LANG": "C.UTF-8",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(codex.parent), "/usr/bin", "/bin"]),
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    done, _ = host_cost.through_codex(str(codex), tmp_path, env, target, tasks, host)
    assert done.returncode == 0 and host.errors == [], (host.errors, done.stderr[-1500:])
    [summary] = Service().runs()
    assert Service().status(summary.id).state == "finished"
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    spawned = [e["item"]["prompt"] for e in events if e["type"] == "item.completed"
               and e["item"]["type"] == "collab_tool_call" and e["item"]["tool"] == "spawn_agent"]
    assert sorted(spawned) == sorted(host_models.helper_prompts(host.skill_md, summary.id).values())
    assert host.requests[host_models.ROLLOUTS] > 0 and host.requests[host_models.REFLECTIONS] > 0
    rollout_helper, reflection_helper = host.seen[host_models.ROLLOUTS], host.seen[host_models.REFLECTIONS]
    assert "<expected>" in reflection_helper[-1] and not any("<expected>" in text for text in rollout_helper)
    assert not any('\\"team\\":' in text or "tasks.jsonl" in text for text in rollout_helper)
    assert "tasks.jsonl" in host.seen["main"][0]  # what the helper was spared: the user's request


def test_work_a_session_held_when_it_ended_goes_to_the_next_session_at_once(claude, home, tmp_path):
    target, tasks, spec = host_cost.setup(tmp_path, 12, 2, 1)
    started = Service().start(spec)
    taken: dict[str, list[str]] = {}

    def takes_and_quits(name: str):
        def script(chat: Chat):
            got = chat.results("host_next")
            if not got:
                return chat.use("host_next", run_id=started.run_id, kind="rollout", wait=30)
            taken[name] = [q["request_id"] for g in got[-1].value["work"] for q in g["requests"]]
            return "I stop here."
        return ScriptedModel(script, prefix=PREFIX, marker="Take AgentDescent's work")

    first = session(claude, home, takes_and_quits("first"), "Take AgentDescent's work, then stop.", tmp_path, EVERY_TOOL)
    ended = time.monotonic()
    assert first.returncode == 0 and taken["first"], first.stderr[-1500:]
    second = session(claude, home, takes_and_quits("second"), "Take AgentDescent's work, then stop.", tmp_path,
                     EVERY_TOOL)
    assert second.returncode == 0
    assert set(taken["first"]) <= set(taken["second"])  # back in the queue with the first session's end
    assert time.monotonic() - ended < 120
    Service().cancel(started.run_id)
