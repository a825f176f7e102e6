"""The run's own callables, built from its materials in the run's process only: the agents the
spec names, and the `run` and `propose` that `evolve` calls.

    run, propose = callables(spec, build.materials(spec), make_agent=..., workdir=...)

The user's agents are imported and called here (`make_client` for a `python:` one), as its
scorer is by `build.reward`: only the run's own process calls them. Each is given the spec's price
(`priced`), which costs its calls that report no cost of their own. The host (a `HostAgent`) is
made by the runner's own factory. What it leaves out: reading the spec's world (`runs.build`)
and running (the runner).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agentdescent.agents import claude_code, scripted, traces
from agentdescent.agents.base import Model, ModelUsage, Price
from agentdescent.agents.providers import CLI_KINDS, PROVIDERS
from agentdescent.agents.redact import redact
from agentdescent.agents.scripted import takes_a_folder
from agentdescent.artifacts import tree_runner
from agentdescent.config import BATCHED_WAVE
from agentdescent.errors import UserError
from agentdescent.reflect import reflector, tree_reflector
from agentdescent.reflect.tree_reflector import format_files
from agentdescent.removal import remove_tree
from agentdescent.returned import as_text
from agentdescent.runs.build import Materials, resolve_ref
from agentdescent.runs.spec import AgentSpec, RunSpec
from agentdescent.types import Task

AgentFactory = Callable[[AgentSpec, str], Callable[..., str]]  # (spec, role) -> a model or an agent
T = TypeVar("T")


def callables(spec: RunSpec, parts: Materials, *, make_agent: AgentFactory, workdir: os.PathLike[str],
              max_workspaces: int = 32) -> tuple[Callable[..., str], Callable[..., str | None]]:
    """`run` and `propose` for `evolve`. `make_agent(agent_spec, role)` builds each agent (the
    runner's own factory knows the host queue); workspaces of folder runs live in `workdir`."""
    agent = priced(make_agent(spec.agent, "rollout"), spec)
    model = priced(make_agent(spec.reflector_spec, "proposal"), spec)
    ask = spec.prompt or "{task}"
    apart = spec.reflector_spec.kind == "host"  # the artifact goes to the host once per candidate, not in each prompt
    reflect_with = model if apart else _as_model(model, spec.reflector_spec, workdir)
    answer_with = _as_model(agent, spec.agent, workdir)
    if parts.tree is None and spec.agent.kind == "host":
        return HostRollout(agent, ask), reflector(reflect_with, apart=apart)
    if parts.tree is None:
        return TextRollout(answer_with, ask), reflector(reflect_with, apart=apart)
    propose = tree_reflector(reflect_with, strategy=parts.strategy, apart=apart)  # type: ignore[arg-type]
    if not works_in_a_folder(spec.agent, agent):  # a plain model sees the folder's files in its prompt instead
        return FilesInPrompt(agent, ask), propose
    overlay = parts.strategy.frozen_files(parts.tree)  # type: ignore[attr-defined]
    if parts.kind == "plugin" and spec.agent.kind == "claude_code":
        agent = priced(PluginHost(spec.agent, parts.layout or "plugin"), spec)
    run = tree_runner(agent, layout=parts.layout or "root", name=parts.name, overlay=overlay, assets=parts.assets,
                      executable=parts.executable,
                      workdir=workdir,
                      prompt=functools.partial(prompt_of, ask),
                      max_workspaces=max(max_workspaces, BATCHED_WAVE) if spec.parallelism.batched else max_workspaces)
    return run, propose


def priced(agent: T, spec: RunSpec) -> T:
    """`agent`, its calls that report no cost of their own (an HTTP model's, codex's, the host's,
    your own code's) costing the spec's price, where it gives one and the agent keeps a `ModelUsage`."""
    usage = getattr(agent, "usage", None)
    if isinstance(usage, ModelUsage) and (spec.price_per_call is not None or spec.price_per_1k_tokens is not None):
        usage.price = Price(per_call=spec.price_per_call, per_1k_tokens=spec.price_per_1k_tokens)
    return agent


def filled(ask: str, prompt: str) -> str:
    """The spec's prompt with the task's prompt where `{task}` is; every other brace stays as
    written (a JSON example in the prompt is text, not a field to fill)."""
    return ask.replace("{task}", prompt)


def prompt_of(ask: str, task: Task) -> str:
    return filled(ask, task.prompt)


# The rollouts below are classes, not closures, so that the process and Ray executors can send them.


@dataclass(frozen=True, eq=False)
class TextRollout:
    """A text target: the model answers the candidate, then the spec's prompt."""

    model: Callable[[str], str]
    ask: str

    def __call__(self, rendered: str, task: Task) -> str:
        return self.model(f"{rendered}\n\n{filled(self.ask, task.prompt)}")


@dataclass(frozen=True, eq=False)
class HostRollout:
    """A text target rolled out by the host: the candidate goes beside the prompt, as its context."""

    agent: Callable[..., str]
    ask: str

    def __call__(self, rendered: str, task: Task) -> str:
        return self.agent(filled(self.ask, task.prompt), context=rendered)


@dataclass(frozen=True, eq=False)
class FilesInPrompt:
    """A folder target answered by a plain model, which sees the folder's files in its prompt."""

    model: Callable[[str], str]
    ask: str

    def __call__(self, rendered: dict[str, str], task: Task) -> str:
        return self.model(f"{format_files(rendered)}\n\n{filled(self.ask, task.prompt)}")


class PluginHost:
    """Claude Code with the candidate plugin loaded, in a home of the rollout's own: each call runs
    `claude --plugin-dir <workspace>/plugin` with HOME in the workspace, so no rollout sees the
    user's configuration, another rollout's, or the plugin as installed."""

    def __init__(self, agent: AgentSpec, folder: str) -> None:
        self.spec, self.folder = agent, folder
        self.name, self.usage = "claude_code", ModelUsage()

    def __call__(self, prompt: str, *, cwd: str | os.PathLike[str]) -> str:
        home = Path(cwd, traces.HOME_IN_WORKSPACE)
        home.mkdir(exist_ok=True)
        options = dict(self.spec.options)
        extra = [*options.pop("extra_args", ()), "--plugin-dir", str(Path(cwd, self.folder))]
        env = {**options.pop("env", {}), "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude")}  # a user's own would win over HOME
        agent = claude_code(model=self.spec.model, extra_args=extra, env=env, **options)
        agent.usage, agent.spec_field = self.usage, "agent"
        return agent(prompt, cwd=cwd)


def make_client(agent: AgentSpec, field: str = "agent") -> Callable[..., str]:
    """A provider's model or CLI agent (its row in `agents.providers` makes it), or your own Python
    agent, from its spec; not the host, which only a runner can make. `field` is the run spec's
    field whose options made it ("agent", "reflector"): a provider's client names it where it
    says how to raise a limit it reached."""
    options = dict(agent.options)
    if agent.kind in PROVIDERS:
        client = PROVIDERS[agent.kind].client(agent.model, **options)
        client.spec_field = field  # type: ignore[attr-defined]
        return client
    if agent.kind == "python":
        found = resolve_ref(agent.ref or "")
        # your own agent: a class made with the options, or a callable given them; either answers with text
        made: Callable[..., str] = (found(**options) if isinstance(found, type)
                                    else functools.partial(found, **options) if options else found)
        return made if hasattr(made, "usage") else scripted(_redacting(made, f"{field} {agent.ref!r}"), name=agent.ref or "python")
    raise UserError(f"agent kind {agent.kind!r} needs the run store (host-driven rollouts)")


def _redacting(fn: Callable[..., str], who: str) -> Callable[..., str]:
    """Your own agent, metered like a model and its replies redacted like a client's (a reply that
    echoes a key must not reach the ledger or the store); a reply that is no text (None, bytes, a
    coroutine never awaited) stops the run naming `who`, as `evolve`'s own `run` does, rather
    than become an answer that scores 0 or a proposal of "None"."""
    return RedactedInFolder(fn, who) if takes_a_folder(fn) else Redacted(fn, who)


@dataclass(frozen=True, eq=False)
class Redacted:
    fn: Callable[[str], str]
    who: str

    def __call__(self, prompt: str) -> str:
        return redact(as_text(self.fn(prompt), f"the {self.who}"))


@dataclass(frozen=True, eq=False)
class RedactedInFolder:
    fn: Callable[[str, str], str]
    who: str

    def __call__(self, prompt: str, cwd: str) -> str:
        return redact(as_text(self.fn(prompt, cwd), f"the {self.who}"))


def works_in_a_folder(spec: AgentSpec, agent: Callable[..., str]) -> bool:
    """CLI agents and the host work in a folder; a Python agent does when it takes (prompt, cwd)."""
    return spec.kind in (*CLI_KINDS, "host") or bool(getattr(agent, "works_in_a_folder", False))


def _as_model(agent: Callable[..., str], spec: AgentSpec, workdir: os.PathLike[str]) -> Model:
    """`prompt -> text`: an agent that works in a folder reflects in an empty one of the run's, its
    own (a reflection must not read what another left), removed once it answered."""
    return InScratchFolder(agent, workdir) if works_in_a_folder(spec, agent) else agent


@dataclass(frozen=True, eq=False)
class InScratchFolder:
    agent: Callable[..., str]
    workdir: os.PathLike[str]

    def __call__(self, prompt: str) -> str:
        scratch = tempfile.mkdtemp(prefix="agentdescent-reflect-", dir=self.workdir)
        try:
            return self.agent(prompt, cwd=scratch)
        finally:
            remove_tree(scratch)  # a folder a tool made read-only in it too
