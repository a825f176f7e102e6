"""What `plan` says of a spec's agents before a run is paid for: a CLI agent that is not
installed, options its client refuses (a misspelt name, a negative backoff), and, as warnings, a
key variable not set here, a plugin's rollouts with no Claude credential, and a CLI too old to
keep its sessions out of the user's home. With `plan --check-models`, each HTTP model's server is
asked for its list of models (`agents.listing`: no tokens spent): a key refused and a model it
does not serve are problems, a server that lists no models a warning.

A provider's client is built to check its options (nothing is sent: the clients read keys and
URLs at call time); a `python:` agent is not, since that runs the user's code (`refcheck` imports
it in a child process instead). Left out: the host, which has no client here.
"""

from __future__ import annotations

import inspect
import os
import shutil

from agentdescent.agents import traces
from agentdescent.agents.listing import listed
from agentdescent.agents.providers import CLI_KINDS, PROVIDERS
from agentdescent.errors import UserError
from agentdescent.hosts.base import cannot_start, not_executable
from agentdescent.runs.spec import AgentSpec, Problem, RunSpec

# What lets Claude Code call a model with no login of its own: a key, a token, a cloud's credentials.
CLAUDE_CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK",
                      "CLAUDE_CODE_USE_VERTEX")


def agent_problems(agent: AgentSpec) -> list[str]:
    """Why `agent` cannot run as the spec says; empty when it can."""
    if agent.kind not in PROVIDERS:
        return []
    if agent.kind in CLI_KINDS:
        executable = agent.options.get("executable", PROVIDERS[agent.kind].program)
        if not isinstance(executable, str) or not executable:
            return [f"options.executable must be a program's name or path, such as {PROVIDERS[agent.kind].program!r}; "
                    f"got {executable!r}"]
        found = shutil.which(executable)
        if found is None:
            unrunnable = None if os.sep in executable else not_executable(executable)
            if unrunnable:
                return [f"{unrunnable} is on PATH but not executable: chmod +x it, or reinstall it"]
            where = ("is not an executable file" if os.sep in str(executable) else "is not on PATH")
            return [f"{executable!r} {where}: install it, or use the host as the agent (agent: host)"]
        if (why := cannot_start(found)) is not None:
            return [why]
    row = PROVIDERS[agent.kind]
    try:
        row.client(agent.model, **agent.options)
    except UserError as exc:
        return [str(exc)]
    except TypeError as exc:  # an option the client does not take, or one of a type it cannot use
        takes = [name for name in inspect.signature(row.factory()).parameters if name != "model"]
        unknown = sorted(set(agent.options) - set(takes))
        if not unknown:
            return [f"options: {exc}"]
        return [f"options: {', '.join(unknown)} is not an option the {agent.kind} client takes; it takes "
                f"{', '.join(takes)}"]
    return []


def missing_keys(spec: RunSpec, kind: str) -> list[str]:
    """Warnings, not problems: a model whose key variable is not set here (a local server may need
    none), and a plugin's Claude Code rollouts with no credential in the environment (`kind`: the
    target's), since they run in a home of their own where the user's login is not."""
    said = []
    if kind == "plugin" and spec.agent.kind == "claude_code" and not any(map(os.environ.get, CLAUDE_CREDENTIALS)):
        said.append("a plugin's rollouts run Claude Code in a home of their own, where your Claude login is not: set "
                    "ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN, from `claude setup-token`) where the run starts, "
                    "or every rollout fails 'Not logged in'")
    for agent in _agents(spec):
        provider = PROVIDERS.get(agent.kind)
        key = agent.options.get("api_key_env", provider.key_variable if provider else None)
        base = provider.base_url_variable if provider else None
        if isinstance(key, str) and key and not os.environ.get(key) and not os.environ.get(base or ""):
            said.append(f"{agent.label}: {key} is not set in this environment; the run will fail unless it is set "
                        "where the run starts")
    return said


CHECK_MODELS_HELP = ("also ask each model's server (agent, reflector) for its list of models, a GET that spends no "
                     "tokens: a key refused or a model name the server does not list is a problem, a server that lists "
                     "no models a warning; CLI agents, the host and python: agents are not asked")


def model_listings(spec: RunSpec) -> tuple[list[Problem], list[str], list[str]]:
    """The spec's HTTP models as their servers list them: (problems: the run would fail, warnings,
    and a line for each model checked or not asked). A model both agent and reflector is asked once."""
    problems: list[Problem] = []
    warnings: list[str] = []
    said: list[str] = []
    asked: set[str] = set()
    for field, agent in (("agent", spec.agent), ("reflector", spec.reflector_spec)):
        row = PROVIDERS.get(agent.kind)
        if row is None or row.kind != "http":
            said.append(f"{field} {agent.label}: not asked (not an HTTP model: it has no list of models to check)")
            continue
        if agent.label in asked:
            continue
        asked.add(agent.label)
        try:
            client = row.client(agent.model, **agent.options)
        except (UserError, TypeError):  # agent_problems says why
            continue
        from agentdescent.agents.http import HTTPModel  # imported already, by the row's client

        assert isinstance(client, HTTPModel), f"the {agent.kind} row makes {type(client).__name__}, no HTTPModel"
        listing = listed(client)
        if listing.error:
            problems.append(Problem(field=field, message=f"{agent.label}: {listing.message}"))
        elif listing.outcome in ("not_found", "unlisted"):
            warnings.append(f"{field} {agent.label}: {listing.message}")
        else:
            said.append(f"{field} {agent.label}: {listing.message}")
    return problems, warnings, said


def unsaved_sessions(spec: RunSpec) -> list[str]:
    """Warnings: a CLI agent too old to be told to save no session (`traces.lists`), so that each
    call's transcript, all the agent saw, stays under the user's home."""
    said = []
    for agent in _agents(spec):
        if agent.kind not in CLI_KINDS:
            continue
        try:
            client = PROVIDERS[agent.kind].client(agent.model, **agent.options)
        except (UserError, TypeError):  # agent_problems says why
            continue
        from agentdescent.agents.cli_agents import CLIAgent  # imported already, by the row's client

        assert isinstance(client, CLIAgent), f"the {agent.kind} row makes {type(client).__name__}, no CLIAgent"
        path = shutil.which(client.executable)
        if path and not traces.lists(path, client.unsaved, client.help_args):
            said.append(f"{agent.label}: {path} does not list {client.unsaved} in its help (an older version?), so "
                        "each call's session, all the agent saw, stays under your home; update it")
    return said


def _agents(spec: RunSpec) -> list[AgentSpec]:
    """The spec's agent and reflector, once where they are the same."""
    return list({spec.agent.label: spec.agent, spec.reflector_spec.label: spec.reflector_spec}.values())
