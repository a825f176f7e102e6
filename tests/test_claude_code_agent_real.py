"""`claude_code(...)` as a rollout agent, driving the real Claude Code (the pinned 2.1.332) against a
scripted model on loopback, in a throwaway HOME: what a call reads and what it leaves behind."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from agentdescent.agents import claude_code
from agentdescent.artifacts import tree_runner
from agentdescent.errors import AgentError
from agentdescent.runs.rootconfig import read_by
from agentdescent.types import Task
from tests.anthropic_stream import Chat, ScriptedModel, ToolUse
from tests.host_clis import host_bin
from tests.loopback import LoopbackServer


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user's home with instructions of their own in ~/.claude/CLAUDE.md, and a temp folder in
    which another user planted a CLAUDE.md above every rollout's workspace."""
    user = tmp_path / "user"
    (user / ".claude").mkdir(parents=True)
    (user / ".claude" / "CLAUDE.md").write_text("FROM_THE_USERS_HOME\n", encoding="utf-8")
    shared = tmp_path / "tmp"
    shared.mkdir()
    (shared / "CLAUDE.md").write_text("PLANTED_ABOVE_THE_WORKSPACE\n", encoding="utf-8")
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    for name, value in {"HOME": str(user), "TMPDIR": str(shared), "ANTHROPIC_API_KEY": "sk-ant-test-0000",
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return user


def _call(model: ScriptedModel, workspace: Path, monkeypatch, **options) -> str:
    with LoopbackServer(model) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        return claude_code(executable=str(host_bin("claude")), **options)("Answer the task.", cwd=workspace)


@pytest.mark.parametrize("own, prefix", [(False, "workspace-"), (True, "workspace-"), (True, "work[space](1)*-")])
def test_a_rollout_in_the_temp_folder_reads_only_its_workspaces_own_claude_md(home, monkeypatch, own, prefix):
    """A CLAUDE.md of the workspace's own (a skill's) switched every other back on: the one any
    user may plant in /tmp, and the user's own instructions (a path holding a glob's characters too)."""
    workspace = Path(tempfile.mkdtemp(prefix=prefix))
    if own:
        (workspace / "CLAUDE.md").write_text("THE_WORKSPACES_OWN\n", encoding="utf-8")
    model = ScriptedModel(lambda chat: "done")
    assert _call(model, workspace, monkeypatch) == "done"
    seen = json.dumps([chat.body for chat in model.chats])
    assert ("THE_WORKSPACES_OWN" in seen, "PLANTED_ABOVE_THE_WORKSPACE" in seen, "FROM_THE_USERS_HOME" in seen) == (
        own, False, False)


def test_a_timed_out_call_leaves_nothing_in_the_users_claude_folder(home, monkeypatch):
    """Killed outright, Claude Code left its live session's files (a peer token among them) and a
    snapshot of the user's shell in ~/.claude; asked to stop first, it removes them."""
    def script(chat: Chat):
        waits = ToolUse("Bash", {"command": "python3 -c 'import time; time.sleep(600)'", "description": "wait"})
        return waits if not chat.history else "done"

    workspace = Path(tempfile.mkdtemp(prefix="workspace-"))
    assert _call(ScriptedModel(lambda chat: "done"), workspace, monkeypatch) == "done"  # what any call leaves
    before = {p for p in (home / ".claude").rglob("*") if p.is_file()}
    with pytest.raises(AgentError, match="timed out after 8 s"):
        _call(ScriptedModel(script), workspace, monkeypatch, timeout=8, extra_args=["--allowedTools", "Bash"])
    left = {p for p in (home / ".claude").rglob("*") if p.is_file()} - before
    assert sorted(str(p.relative_to(home)) for p in left if {"sessions", "shell-snapshots"} & set(p.parts)) == []


def test_a_prompt_past_what_one_command_line_argument_holds_reaches_the_model_whole(home, monkeypatch):
    """A reflection's prompt holds the whole folder: past Linux's 128 KiB an argument, the real CLI
    could not even start ('Argument list too long'); it reads such a prompt on stdin."""
    prompt = "Answer the task. " + "".join(f"line {i} of a large skill folder\n" for i in range(8_000))
    model = ScriptedModel(lambda chat: "done")
    with LoopbackServer(model) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        assert claude_code(executable=str(host_bin("claude")))(prompt, cwd=tempfile.mkdtemp()) == "done"
    assert "line 7999 of a large skill folder" in json.dumps(model.chats[0].body)


def test_a_subagents_tokens_are_on_the_calls_usage(home, monkeypatch):
    """The main loop hands a job to a subagent in the background and a task notification starts a
    second turn: the result's `usage` holds that last turn alone, its `modelUsage` every request."""
    def script(chat: Chat):
        if "SUBAGENT-JOB" in json.dumps(chat.body["messages"][0]):
            return "sub done"  # the subagent's own loop
        if not chat.history:
            tool = "Task" if "Task" in chat.offered else "Agent"
            return ToolUse(tool, {"description": "sub", "prompt": "SUBAGENT-JOB: say sub done",
                                  "subagent_type": "general-purpose"})
        return "done"

    model, requests = ScriptedModel(script), []
    with LoopbackServer(lambda request: requests.append(request.path) or model(request)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        agent = claude_code(executable=str(host_bin("claude")))
        agent("Answer the task.", cwd=tempfile.mkdtemp(prefix="workspace-"))
    assert model.errors == [] and len(model.chats) >= 3  # the main loop twice, the subagent at least once
    sent = requests.count("/v1/messages")  # each answered as 1 token in, 1 out
    assert (agent.usage.input_tokens, agent.usage.output_tokens) == (sent, sent)


@pytest.mark.parametrize("extra_args", [[], ["--strict-mcp-config"]])
def test_a_root_workspaces_settings_and_servers_run_as_rootconfig_says(home, monkeypatch, tmp_path, extra_args):
    """What `plan` names for layout root is what the pinned CLI runs: each of the three files, unasked
    (.mcp.json's servers with no enableAllProjectMcpServers), its hooks with the key in their
    environment, and none of what the agent's flags leave out."""
    marks = tmp_path / "marks"
    marks.mkdir()
    files = {".claude/settings.json": "settings", ".claude/settings.local.json": "local", ".mcp.json": "mcp"}

    def hook(mark: str) -> str:
        return json.dumps({"hooks": {"SessionStart": [{"hooks": [
            {"type": "command", "command": f"printenv ANTHROPIC_API_KEY > {marks / mark}"}]}]}})

    tree = {".claude/settings.json": hook("settings"), ".claude/settings.local.json": hook("local"),
            ".mcp.json": json.dumps({"mcpServers": {"s": {"command": "sh", "args": ["-c", f"echo x > {marks / 'mcp'}"]}}}),
            "CLAUDE.md": "Answer the task.\n"}
    with LoopbackServer(ScriptedModel(lambda chat: "done")) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        run = tree_runner(claude_code(executable=str(host_bin("claude")), extra_args=extra_args), layout="root")
        assert run(tree, Task(id="t1", prompt="Which team?")) == "done"
    assert {path for path, mark in files.items() if (marks / mark).exists()} == read_by(extra_args)
    assert {(marks / mark).read_text(encoding="utf-8") for mark in ("settings", "local")} == {"sk-ant-test-0000\n"}
