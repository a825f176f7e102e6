"""A spec of kind `plugin`: a host plugin folder (ours) evolved as an artifact. What runs or connects
(hooks, settings, .mcp.json, lockfiles) is L0; every rollout loads the candidate into Claude Code
with `--plugin-dir`, in a home of its own, with the run's marker in its environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentdescent.artifacts import FileTree
from agentdescent.governance import PLUGIN_BLAST_RADIUS, Governance
from agentdescent.runs.agentcheck import CLAUDE_CREDENTIALS
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
FAKE_CLAUDE = ROOT / "tests" / "fake_clis" / "claude"


def test_a_plugin_run_loads_each_candidate_in_a_throwaway_home_and_never_rewires_the_plugin(
        service, tmp_path, monkeypatch):
    plugin = tmp_path / "agentdescent-plugin"
    shutil.copytree(ROOT / "plugins" / "claude-code", plugin)
    log = tmp_path / "claude.log"
    monkeypatch.setenv("FAKE_CLI_LOG", str(log))
    monkeypatch.setenv("FAKE_CLI_SHOW_ENV", "HOME,AGENTDESCENT_RUN,CLAUDE_CONFIG_DIR")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "users-claude"))  # the user's own: its hooks would run
    spec = {"target": str(plugin), "tasks": [{"id": f"t{i}", "prompt": f"task {i}", "gold": "done"} for i in range(6)],
            "agent": {"kind": "claude_code", "options": {"executable": str(FAKE_CLAUDE)}},
            "reflector": "python:tests.plugin_domain:rewire", "n_workers": 1, "rounds": 1}
    plan = service.plan(spec)
    assert plan.kind == "plugin"
    run = service.start(spec).run_id
    done = wait(service, run)
    assert done.state == "finished", done

    calls = [call for line in log.read_text(encoding="utf-8").splitlines()
             if (call := json.loads(line))["argv"] != ["--help"]]  # asked once whether it knows a flag
    assert calls and all(c["program"] == "claude" for c in calls)
    for call in calls:
        plugin_dir = call["argv"][call["argv"].index("--plugin-dir") + 1]
        assert plugin_dir == str(Path(call["cwd"], "plugin"))  # the candidate, in the rollout's workspace
        assert call["env"]["HOME"] == str(Path(call["cwd"], ".home"))  # a home of its own
        assert call["env"]["CLAUDE_CONFIG_DIR"] == str(Path(call["cwd"], ".home", ".claude"))
        assert call["env"]["AGENTDESCENT_RUN"] == run  # the recursion guard's marker
    refused = [d for d in service.show(run).rejected if d.outcome == "refused_by_governance"]
    assert refused and all(".mcp.json" in d.reason for d in refused)
    assert (plugin / ".mcp.json").read_text(encoding="utf-8") == (ROOT / "plugins/claude-code/.mcp.json").read_text(
        encoding="utf-8")


def test_plan_warns_that_a_plugins_rollouts_need_a_credential_in_the_environment(service, tmp_path, monkeypatch):
    """They run Claude Code in a home of their own, where the user's login is not: every rollout
    failed 'Not logged in · Please run /login', and plan had said nothing."""
    plugin = tmp_path / "agentdescent-plugin"
    shutil.copytree(ROOT / "plugins" / "claude-code", plugin)
    spec = {"target": str(plugin), "tasks": [{"id": f"t{i}", "prompt": f"task {i}", "gold": "done"} for i in range(6)],
            "agent": {"kind": "claude_code", "options": {"executable": str(FAKE_CLAUDE)}},
            "reflector": "python:tests.plugin_domain:rewire"}
    for name in CLAUDE_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    assert any(w.startswith("a plugin's rollouts run Claude Code in a home of their own") for w in
               service.plan(spec).warnings)
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-" + "x" * 40)
    assert not any("home of their own" in w for w in service.plan(spec).warnings)


def test_a_plugin_s_hooks_settings_server_and_lockfiles_are_l0_and_the_rest_l1():
    rules = Governance.of(FileTree({"x": ""}), PLUGIN_BLAST_RADIUS)
    for key in ("hooks/hooks.json", ".mcp.json", "settings.json", ".claude/settings.local.json", "package-lock.json",
                "uv.lock", "pnpm-lock.yaml"):
        assert rules.layer(key) == "L0", key
    assert rules.layer(".claude-plugin/plugin.json") == "L0"  # it may declare hooks and servers inline
    for key in ("skills/agentdescent/SKILL.md", "commands/evolve.md", "scripts/helper.py"):
        assert rules.layer(key) == "L1", key


HOOKS = {"hooks": {"SessionStart": [{"hooks": [{"type": "command",
                                                "command": 'bash "${CLAUDE_PLUGIN_ROOT}/scripts/on-start.sh"'}]}],
                   "Stop": [{"hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/bin/not-yet.sh"}]}]}}
MANIFEST = {"name": "p", "mcpServers": {"s": {"command": "node", "args": ["server.js"]}}}


def test_what_a_hook_or_a_server_starts_is_frozen_as_the_hook_is_whatever_the_blast_radius():
    """A diff to the script a SessionStart hook runs, or one creating the script a hook names, would
    run unjudged at the next rollout's start."""
    content = {"hooks/hooks.json": json.dumps(HOOKS), ".claude-plugin/plugin.json": json.dumps(MANIFEST),
               "scripts/on-start.sh": "echo hi\n", "scripts/lib.sh": "x=1\n", "server.js": "serve()\n",
               "start.sh": "echo not started\n", "skills/s/SKILL.md": "---\nname: s\n---\n", "other.js": "x\n",
               "docs/notes.txt": "notes\n"}
    for radius, rest in ((PLUGIN_BLAST_RADIUS, "L1"), ({"*": "L2"}, "L2")):
        rules = Governance.of(FileTree(content), radius)
        started = ("scripts/on-start.sh", "scripts/lib.sh", "server.js", "bin/not-yet.sh", "start.sh", "other.js")
        assert [rules.layer(key) for key in started] == ["L0"] * len(started)  # start.sh: a script of the hooks' kind
        assert rules.layer("skills/s/SKILL.md") == rules.layer("docs/notes.txt") == rest
    assert "started by the folder's hooks or servers ('*.sh')" in rules.rule("scripts/lib.sh")[1]
    assert Governance.of(FileTree(content)).layer("scripts/on-start.sh") == "L2"  # no blast radius: no layers at all


@pytest.mark.parametrize("command", [
    'sh "${CLAUDE_PLUGIN_ROOT}"/scripts/on-start.sh', "sh ${CLAUDE_PLUGIN_ROOT}//scripts/on-start.sh",
    '"$CLAUDE_PROJECT_DIR"/scripts/on-start.sh', "cd ${CLAUDE_PLUGIN_ROOT}/scripts && ./on-start.sh",
    "D=$CLAUDE_PLUGIN_ROOT; sh $D/scripts/on-start.sh", "`${CLAUDE_PLUGIN_ROOT}/scripts/on-start.sh`",
])
def test_a_hook_script_is_frozen_however_its_command_spells_its_path(command):
    """Quoting the variable alone, a doubled slash, another host's variable, a cd, a variable of
    one's own: each spelling let a diff to the script run in the rollouts."""
    hooks = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": command}]}]}}
    content = {"hooks/hooks.json": json.dumps(hooks), "scripts/on-start.sh": "echo hi\n", "SKILL.md": "# s\n"}
    rules = Governance.of(FileTree(content), PLUGIN_BLAST_RADIUS)
    assert rules.layer("scripts/on-start.sh") == "L0" and rules.layer("SKILL.md") == "L1"


def test_hooks_a_manifest_points_to_and_hooks_in_a_definitions_frontmatter_freeze_what_they_run():
    content = {".claude-plugin/plugin.json": json.dumps({"name": "p", "hooks": "./config/hooks.json"}),
               "config/hooks.json": json.dumps(HOOKS), "scripts/on-start.sh": "echo hi\n",
               "agents/a.md": "---\nname: a\nhooks:\n  Stop:\n    - command: ${CLAUDE_PLUGIN_ROOT}/tools/stop.py\n---\nA.\n",
               "tools/stop.py": "print()\n", "tools/notes.md": "notes\n"}
    rules = Governance.of(FileTree(content), PLUGIN_BLAST_RADIUS)
    assert [rules.layer(k) for k in ("config/hooks.json", "scripts/on-start.sh", "tools/stop.py")] == ["L0"] * 3
    assert rules.layer("tools/notes.md") == "L1"
