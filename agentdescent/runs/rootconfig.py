"""What Claude Code runs of a folder target laid at the root of each rollout's workspace (`layout:
root`): there the folder's `.claude/settings.json`, `.claude/settings.local.json` and `.mcp.json`
are the project's own configuration, and `claude -p` asks no one to trust the folder before it acts
on them. Their hooks, MCP servers and helper programs run in every rollout, on this machine, with
the agent's key in their environment, and their `env` reaches Claude Code itself (an
`ANTHROPIC_BASE_URL` there sends the key where it says). A project's harness evolved with its hooks
may mean exactly that, so nothing is turned off: `plan`, the start of a run, its resume and its
status name what will run, each part quoted and the list capped, and how to keep it from running.

    root_config_warnings(<layout root, agent claude_code, a .mcp.json starting server "evil">)
    == ["layout root puts the target's .mcp.json at the root ...: MCP server «evil»: «sh -c ...»; ..."]

The other layouts put the folder below the root (`.claude/skills/<name>/`, `.claude/agents/`,
`.agents/skills/<name>/`, `plugin/`), where Claude Code reads none of it as project configuration.
A diff that could write one of these files (a blast radius that does not freeze it) is named too.
Left out: what a skill's or subagent's own frontmatter starts (no diff widens it: `capabilities`),
and a `python:` agent, whose code decides what it reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence

from agentdescent.artifacts.workspace import LAYOUTS
from agentdescent.governance import Governance
from agentdescent.quoting import first_of, quoted
from agentdescent.runs import review
from agentdescent.runs.build import Materials, assemble
from agentdescent.runs.spec import RunSpec
from agentdescent.runs.store import RunDir

# Claude Code's project configuration in the folder it works in, by the setting source that reads it.
CONFIG_FILES = {".claude/settings.json": "project", ".claude/settings.local.json": "local", ".mcp.json": "project"}
HELPERS = ("apiKeyHelper", "awsAuthRefresh", "awsCredentialExport", "gcpAuthRefresh", "otelHeadersHelper")  # settings that run a program
SHOWN = 6  # what runs, named: the rest counted
QUOTE_CHARS = 120


def root_config_warnings(spec: RunSpec, parts: Materials) -> list[str]:
    """What `plan` and a run's start say of the project configuration a Claude Code rollout takes
    from the target at its workspace's root; [] for any other layout or agent."""
    if parts.tree is None or LAYOUTS.get(parts.layout or "") != "" or spec.agent.kind != "claude_code":
        return []
    read = read_by(spec.agent.options.get("extra_args"))
    found = {path: key for key in [*parts.tree, *parts.assets] if key.isascii() and (path := key.lower()) in read}
    said = [_runs(found, parts)] if found else []
    rules = Governance.of(parts.strategy, parts.blast_radius)
    writable = [found.get(path, path) for path in sorted(read) if rules.refusal([found.get(path, path)]) is None]
    if writable:
        first = ", ".join(f"{json.dumps(key)}: L0" for key in writable)
        said.append(f"a diff may write {_listed(writable)} (neither frozen nor L0 in the blast radius), at the root of "
                    "each rollout's workspace, where Claude Code would run the hooks and servers it adds in the very "
                    f"rollouts that test it, before anyone judges it: put them first in the spec's blast_radius, "
                    f"{{{first}, ...its other patterns}}")
    return [s for s in said if s]


def read_by(extra_args: object) -> set[str]:
    """Those of `CONFIG_FILES` Claude Code reads with these extra arguments: `--setting-sources`
    names the sources it reads, `--strict-mcp-config` leaves `.mcp.json` out.
    read_by(["--strict-mcp-config"]) == {".claude/settings.json", ".claude/settings.local.json"} """
    args = [str(arg) for arg in extra_args] if isinstance(extra_args, Sequence) and not isinstance(extra_args, str) else []
    read = set(CONFIG_FILES)
    for i, arg in enumerate(args):
        given = args[i + 1] if arg == "--setting-sources" and i + 1 < len(args) else arg.partition("=")[2] if (
            arg.startswith("--setting-sources=")) else None
        if given is not None:
            sources = {source.strip() for source in given.split(",")}
            read = {path for path in read if CONFIG_FILES[path] in sources}
    return read - {".mcp.json"} if "--strict-mcp-config" in args else read


def _runs(found: Mapping[str, str], parts: Materials) -> str:
    """The warning that names what the files `found` ({config file: the target's key}) run, or ""."""
    named: list[str] = []
    unread: list[str] = []
    for path, key in sorted(found.items()):
        text = parts.tree.get(key) if parts.tree is not None else None
        data = _parsed(text)
        if not isinstance(data, dict):
            unread.append(f"{key} (not UTF-8 text)" if text is None else key)
        else:
            named += _servers(data) if path == ".mcp.json" else _settings(data)
    if not named and not unread:
        return ""
    keys = sorted(found.values())
    runs = f": {first_of(named, SHOWN, '; ')}" if named else ""
    if unread:
        one = len(unread) == 1
        runs += (f". {_listed(unread)} {'is' if one else 'are'} no JSON object this can read: what {'it runs' if one else 'they run'} "
                 f"is not named (Claude Code may still act on {'it' if one else 'them'}; read {'it' if one else 'them'} yourself)")
    return (f"layout root puts the target's {_listed(keys)} at the root of each rollout's workspace, where Claude Code "
            "(claude -p, which asks no one to trust the folder) takes them as the project's own configuration and acts "
            f"on them in every rollout, on this machine, with the agent's key in their environment{runs}. If they are "
            "part of what the run evolves, that is what its rollouts test; else keep them from running: "
            f"exclude: [{', '.join(keys)}] in the spec (the run then neither reads nor writes them), or a layout that "
            "puts the folder below the root (claude_skill, claude_agents)")


def _listed(names: list[str]) -> str:
    """_listed(["a", "b", "c"]) == "a, b and c" """
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _settings(data: Mapping[str, object]) -> list[str]:
    """What a settings file runs: each hook by its event, the helper programs, what its env sets."""
    named = [f"hook {quoted(event, 40)}: {quoted(_what(hook), QUOTE_CHARS)}" for event, hook in _hooks(data.get("hooks"))]
    for name in HELPERS:
        helper = data.get(name)
        if helper:
            named.append(f"{name}: {quoted(_what(helper), QUOTE_CHARS)}")
    env = data.get("env")
    if isinstance(env, dict) and env:
        named.append(f"env: {quoted(' '.join(f'{k}={v}' for k, v in env.items()), QUOTE_CHARS)}")
    return named


def _hooks(hooks: object) -> Iterator[tuple[str, object]]:
    """(event, hook) for each hook of a settings file's `hooks`: {event: [{matcher, hooks: [hook]}]}."""
    if not isinstance(hooks, dict):
        return
    for event, groups in hooks.items():
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None
            yield from ((str(event), hook) for hook in (inner if isinstance(inner, list) else []))


def _servers(data: Mapping[str, object]) -> list[str]:
    servers = data.get("mcpServers")
    return [f"MCP server {quoted(name, 40)}: {quoted(_what(server), QUOTE_CHARS)}"
            for name, server in (servers.items() if isinstance(servers, dict) else [])]


def _what(entry: object) -> str:
    """A hook's, a server's or a helper's program with its arguments, or the address it reaches."""
    if not isinstance(entry, dict):
        return str(entry)
    args = entry.get("args")
    words = [entry.get("command") or entry.get("url") or entry.get("prompt") or json.dumps(entry)[:QUOTE_CHARS],
             *(args if isinstance(args, list) else [])]
    return " ".join(str(word) for word in words)


def _parsed(text: str | None) -> object:
    try:
        return None if text is None else json.loads(text)
    except (ValueError, RecursionError):
        return None


def root_config_of_stored(run: RunDir) -> list[str]:
    """`root_config_warnings` of the run as it was made (its spec, its target's files as stored):
    what its rollouts run when it is resumed, whatever the target holds now."""
    spec = run.spec()
    return root_config_warnings(spec, assemble(spec, [], review.initial(run), run.assets(), run.executable()))
