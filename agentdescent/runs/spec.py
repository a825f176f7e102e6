"""Run specs: what a run evolves, on which tasks, with which agent, for how much, as checked data.

A spec is read from JSON or YAML (`read_spec`), or handed over as a mapping (the MCP server), and
checked in two passes before anything runs: the schema (pydantic: every field's type and range),
then the world (`problems`: the target exists and is of its kind, the tasks load and are enough,
the frozen globs match files, the agents exist). Every problem is listed by field in one
`SpecError`. Relative paths are read against the spec file's folder (or the caller's `base`),
and a checked spec holds only absolute ones, so the run store can keep it as it is.

A spec file is bounded data (`spec_file`); its problems are worded by `spec_problems`.

    target: my-skill/                    # a folder (skill_dir, agent_dir) or a text file (text)
    tasks: {file: tasks.jsonl, prompt: request, gold: expected}
    scorer: exact
    agent: claude_code                   # or openai:gpt-4o-mini, claude:claude-sonnet-4-5, host, python:pkg.mod:fn
    reflector: claude:claude-sonnet-4-5
    n_workers: 4
    rounds: 8
    budget: {max_calls: 400}
    frozen: ["hooks/*"]

Left out: building the run's callables from a spec (`build`) and what a run costs (`quote`).
Keys never go in a spec: options that would hold one are refused, the clients read them at call time.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentdescent import reading
from agentdescent.agents.endpoint import secret_param
from agentdescent.agents.providers import MODEL_KINDS, PROVIDER_KINDS, PROVIDERS
from agentdescent.artifacts.workspace import LAYOUTS
from agentdescent.config import Settings
from agentdescent.dataloader.local import TASK_FILE_SUFFIXES
from agentdescent.errors import UserError
from agentdescent.governance import BLAST_RADII, Layer, not_layers, unsafe_key_reason
from agentdescent.runs.spec_problems import Problem, SpecError, schema_problems
from agentdescent.scoring import SCORER_NAMES
from agentdescent.types import Task

if TYPE_CHECKING:  # a type checker reads no Literal built from a table: to it these are any text (pydantic checks them)
    AgentKind = str
    RadiusName = str
else:
    AgentKind = Literal[PROVIDER_KINDS + ("host", "python")]  # every provider's (agents/providers.py), the host, your own
    RadiusName = Literal[tuple(BLAST_RADII)]  # a blast radius by name (governance.BLAST_RADII)
TargetKind = Literal["text", "skill_dir", "agent_dir", "plugin"]
_SECRET_NAME = re.compile(r"(key|token|secret|password|credential)$", re.IGNORECASE)
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
MOVED = {  # a field's earlier name -> (the object it moved into, or None, and its name now)
    "workers": (None, "n_workers"), "max_calls": ("budget", "max_calls"), "max_tokens": ("budget", "max_tokens"),
    "rollout_timeout": ("budget", "rollout_timeout"),
}


HOST_REFLECTIONS = 3  # failures a worker reflects on when the host reflects (see RunSpec._more_reflections_for_host)


def _kind(agent: Any) -> Any:
    """The kind an agent field names, as given: `host`, `{kind: host, ...}`."""
    return agent.get("kind") if isinstance(agent, dict) else agent


def _moved_names(value: dict) -> list[tuple[str, str]]:
    """The earlier names `value` uses, each with its field's dotted name now: [("workers", "n_workers")]."""
    return [(name, f"{parent}.{field}" if parent else field) for name, (parent, field) in MOVED.items() if name in value]


def _has(value: dict, dotted: str) -> bool:
    """Whether the mapping `value` gives the field at `dotted` ("budget.max_calls")."""
    parent, _, field = dotted.rpartition(".")
    holder = value.get(parent) if parent else value
    return isinstance(holder, dict) and field in holder


class AgentSpec(BaseModel):
    """A model, a CLI agent, the host (the coding agent that called us does the work), or a Python
    callable of your own. A string is a shorthand: `openai:gpt-4o-mini`, `claude_code`, `host`,
    `python:my_module:my_agent`."""

    model_config = _STRICT

    kind: AgentKind
    model: str | None = None  # the model name for openai / deepseek / claude; optional for the CLI agents
    ref: str | None = None  # python: "module:attribute", a model `prompt -> text` (or `prompt, cwd -> text`)
    options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the client or the callable

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        kind, _, rest = value.partition(":")
        if kind == "python":
            return {"kind": kind, "ref": rest or None}
        return {"kind": kind, "model": rest or None}

    @model_validator(mode="after")
    def _complete(self) -> AgentSpec:
        if self.kind in MODEL_KINDS and not self.model and PROVIDERS[self.kind].default_model is None:
            raise ValueError(f"the {self.kind} agent needs a model name: '{self.kind}:<model>'")
        if self.kind == "python" and (not self.ref or ":" not in self.ref):
            raise ValueError("a python agent needs ref='module:attribute', e.g. 'python:my_agents:answer'")
        secret = _secret_option(self.options)
        if secret:
            keys = ", ".join(PROVIDERS[kind].key_variable or "" for kind in MODEL_KINDS)
            raise ValueError(f"options.{secret} looks like a credential: keys never go in a spec. Set it in the "
                             f"environment (the clients read {keys}, or the variable named by options.api_key_env)")
        carried = _secret_in_url(self.options.get("base_url"))
        if carried:
            variable = PROVIDERS[self.kind].base_url_variable if self.kind in MODEL_KINDS else None
            where = f"{variable} (or the variable options.base_url_env names)" if variable else "the environment"
            raise ValueError(f"options.base_url carries {carried}, and a spec is stored with the run: put the "
                             f"whole URL in {where} instead, or take it out")
        return self

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.model or self.ref}" if (self.model or self.ref) else self.kind


class TasksSpec(BaseModel):
    """Where the tasks come from: inline, a local file (`TASK_FILES`), or a Hugging Face
    dataset; the columns say which field is the prompt, the gold answer and the id."""

    model_config = _STRICT

    inline: list[Task] | None = None
    file: str | None = None
    hf: str | None = None  # a dataset name on the Hugging Face hub, e.g. "openai/gsm8k"
    split: str = "train"
    config: str | None = None
    limit: int | None = Field(default=None, ge=1)
    prompt: str = "prompt"  # a column name or a format string with {column} fields
    gold: str | None = "gold"
    id: str | None = "id"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {"inline": value}
        if isinstance(value, str):
            return {"file": value}
        return value

    @model_validator(mode="after")
    def _one_source(self) -> TasksSpec:
        given = [name for name in ("inline", "file", "hf") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of inline (a list of tasks), file (a {TASK_FILE_SUFFIXES} path) "
                             f"and hf (a dataset name); got {', '.join(given) or 'none'}")
        return self


class ScorerSpec(BaseModel):
    """How an output is scored: a built-in scorer by name, an external grader command, or a Python
    reward function `(task, output) -> float in [0, 1]`. A string is a name (or `python:module:fn`)."""

    model_config = _STRICT

    name: str | None = None
    pattern: str | None = None  # for "regex"
    tolerance: float = 1e-6  # for "numeric"
    command: list[str] | None = None
    timeout: float | None = Field(default=None, gt=0)  # seconds a grader command may run (None: GRADER_TIMEOUT)
    ref: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            kind, _, rest = value.partition(":")
            return {"ref": rest} if kind == "python" else {"name": value}
        if isinstance(value, list):
            return {"command": value}
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ScorerSpec:
        given = [name for name in ("name", "command", "ref") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of name ({', '.join(SCORER_NAMES)}), command [argv...] and "
                             f"ref 'module:function'; got {', '.join(given) or 'none'}")
        if self.name is not None and self.name not in SCORER_NAMES:
            raise ValueError(f"unknown scorer {reading.name_or_count(self.name)}; choose one of {', '.join(SCORER_NAMES)}")
        if self.timeout is not None and self.command is None:
            raise ValueError("timeout is for a grader command (scorer: {command: [...], timeout: SECONDS}); "
                             "take it out, or bound the whole rollout with budget.rollout_timeout")
        return self


class RunSpec(Settings):
    """Everything a run needs, checked: the run's `config.Settings` (rounds, n_workers, budget,
    parallelism, policies, ...: every option `evolve` has, under its name) and what a spec adds
    to find the run's parts. See the module docstring for an example."""

    model_config = _STRICT

    target: str
    kind: TargetKind | None = None  # None: as the target's shape says (`build.target_kind`)
    tasks: TasksSpec
    scorer: ScorerSpec = Field(default_factory=lambda: ScorerSpec(name="exact"))
    agent: AgentSpec
    reflector: AgentSpec | None = None  # None: the agent, when it is a model or the host
    price_per_call: float | None = Field(default=None, ge=0)  # in USD: the quote's, and the calls' that report no cost
    price_per_1k_tokens: float | None = Field(default=None, ge=0)
    strategy: Literal["single", "append"] = "single"  # text targets: lines appended, or a playbook of rules
    frozen: list[str] = Field(default_factory=list)  # folder targets: globs of files no diff may touch
    exclude: list[str] = Field(default_factory=list)  # folder targets: globs of files the run leaves out entirely
    editable: list[str] = Field(default_factory=lambda: ["**"])
    blast_radius: RadiusName | dict[str, Layer] | None = None  # None: by kind
    layout: str | None = None  # folder targets: where the agent reads the folder (None: by kind, and by agent for codex)
    name: str | None = None  # the skill's folder name in the skill layouts (None: its SKILL.md's name, else the folder's)
    max_files_per_diff: int = Field(default=2, ge=1)
    host_timeout: float = Field(default=1800, gt=0)  # seconds a host-driven rollout or proposal may wait
    prompt: str | None = None  # what the agent is asked per task; {task} is the task's prompt
    keys_in_target: Literal["refuse", "mask"] = "refuse"  # a key's value in the target or tasks (runs.keys)
    moved: list[str] = Field(default_factory=list, exclude=True)  # fields read under an earlier name

    @model_validator(mode="before")
    @classmethod
    def _earlier_names(cls, value: Any) -> Any:
        """A spec written with an earlier name of a field (`workers`, a top-level `max_calls`) is read
        into its place, and `moved` says so, for `plan` to warn about. A spec that gives both names
        is refused: which of the two values it means is not for us to guess."""
        if not isinstance(value, dict) or not any(name in value for name in MOVED):
            return value
        twice = [f"{name} and {now} are both given ({name} is the earlier name of {now}); keep {now} and remove "
                 f"{name}" for name, now in _moved_names(value) if _has(value, now)]
        if twice:
            raise ValueError("; ".join(twice))
        value, moved = dict(value), []
        for name, (parent, field) in MOVED.items():
            if name not in value:
                continue
            given = value.pop(name)
            if parent is None:
                value[field] = given
            elif isinstance(value.get(parent, {}), dict):
                value[parent] = {field: given, **value.get(parent, {})}
            moved.append(f"{name}: {parent + '.' if parent else ''}{field}")
        return {**value, "moved": moved}

    @model_validator(mode="before")
    @classmethod
    def _batched_for_host(cls, value: Any) -> Any:
        """A run the host answers is batched (`config.Parallelism`) unless the spec says otherwise."""
        host = any(_kind(a) == "host" for a in ((value.get("agent"), value.get("reflector")) if isinstance(value, dict) else ()))
        parallelism = value.get("parallelism", {}) if host else None
        return ({**value, "parallelism": {**parallelism, "batched": True}}
                if isinstance(parallelism, dict) and "batched" not in parallelism else value)

    @model_validator(mode="before")
    @classmethod
    def _more_reflections_for_host(cls, value: Any) -> Any:
        """A run the host reflects for takes `HOST_REFLECTIONS` failures a worker (`WorstFirst`)
        unless the spec says otherwise: a round's reflections reach the host as one wave, answered
        in one request however many they are, so a third costs the host nothing while a run of few
        rounds learns more in each."""
        if not isinstance(value, dict):
            return value
        reflector = value.get("reflector") or value.get("agent")
        policies = value.get("policies", {})
        proposal = policies.get("proposal", {}) if isinstance(policies, dict) else None
        if _kind(reflector) != "host" or not isinstance(proposal, dict) or "max_proposals" in proposal:
            return value
        return {**value, "policies": {**policies, "proposal": {**proposal, "max_proposals": HOST_REFLECTIONS}}}

    @field_validator("prompt")
    @classmethod
    def _asks_the_task(cls, value: str | None) -> str | None:
        if value is not None and "{task" in value and "{task}" not in value:
            raise ValueError("names the task as {task} and nothing else (no width, no conversion): each task's prompt "
                             "is put there as it is")
        if value is not None and "{task}" not in value:
            raise ValueError("holds no {task}: each task's prompt goes where {task} is, so without it every "
                             "task would be asked the same; add {task} where the task belongs")
        return value

    @field_validator("blast_radius", mode="before")
    @classmethod
    def _layers(cls, value: Any) -> Any:
        if value is None or isinstance(value, str) and value in BLAST_RADII:
            return value
        wrong = (f"is {reading.name_or_count(value)}" if isinstance(value, str) else
                 f"is a {type(value).__name__}" if not isinstance(value, dict) else not_layers(value))
        if wrong:
            raise ValueError(f"{wrong}; give {', '.join(BLAST_RADII)}, or a mapping of file patterns to layers "
                             '(L0 frozen, L1 gated, L2 free) such as {"hooks/*": L0, "*": L2}')
        return value

    @field_validator("name")
    @classmethod
    def _one_folder(cls, value: str | None) -> str | None:
        if value is not None and ("/" in value or "\\" in value or unsafe_key_reason(value)):
            raise ValueError("is the skill's folder name: one name, with no / or \\ and no .. (support-router, say)")
        return value

    @field_validator("layout")
    @classmethod
    def _known_layout(cls, value: str | None) -> str | None:
        if value is not None and value not in LAYOUTS:
            raise ValueError(f"unknown layout {reading.name_or_count(value)}; choose one of {', '.join(LAYOUTS)}")
        return value

    @property
    def reflector_spec(self) -> AgentSpec:
        return self.reflector or self.agent


def read_spec(source: str | os.PathLike | dict[str, Any], *, base: str | os.PathLike | None = None) -> RunSpec:
    """The checked spec from a JSON or YAML file, or from a mapping (relative paths against `base`,
    default the current folder). Raises `SpecError` listing every problem."""
    if isinstance(source, dict):
        data, folder = source, Path(base or os.getcwd())
    else:
        from agentdescent.runs.spec_file import read_spec_file  # here: a spec given as a mapping needs no YAML reader

        path = Path(source)
        try:
            data, folder = read_spec_file(path), path.absolute().parent
        except UserError as exc:
            raise SpecError([Problem(field="spec", message=str(exc))]) from None
    if (field := reading.nul_at({"base": os.fspath(base or ""), **data})) is not None:
        raise SpecError([Problem(field=field, message="holds a NUL character, which no path or name can hold; take it out")])
    if (found := reading.surrogate_at(data)) is not None:  # a spec is written again as UTF-8 (the run store's)
        field, in_key = found
        said = f"a key of it {reading.SURROGATE_FIX}" if in_key else reading.SURROGATE_FIX
        raise SpecError([Problem(field=field or "spec", message=said)])
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(schema_problems(exc.errors(), RunSpec)) from None
    return _absolute(spec, folder)


def _absolute(spec: RunSpec, folder: Path) -> RunSpec:
    def resolved(path: str) -> str:
        return os.path.normpath((folder / os.path.expanduser(path)).absolute())

    tasks = spec.tasks.model_copy(update={"file": resolved(spec.tasks.file)}) if spec.tasks.file else spec.tasks
    scorer = spec.scorer
    if scorer.command:
        scorer = scorer.model_copy(update={"command": _command_paths(scorer.command, folder)})
    return spec.model_copy(update={"target": resolved(spec.target), "tasks": tasks, "scorer": scorer})


def _command_paths(argv: list[str], folder: Path) -> list[str]:
    """A grader command with its relative paths read from `folder` (the spec's): the program when
    it names a path (it holds a /; a bare name is found on PATH), and each other argument that
    names a file or folder there (an option, -x, stays as it is).
    _command_paths(["python", "g/ok.py"], Path("/s")) == ["python", "/s/g/ok.py"] when /s/g/ok.py exists"""
    def rebased(arg: str) -> str:
        return os.path.normpath(folder / arg)

    program, *rest = argv
    if "/" in program and not os.path.isabs(program):
        program = rebased(program)
    return [program, *(rebased(arg) if _there(arg, folder) else arg for arg in rest)]


def _there(arg: str, folder: Path) -> bool:
    return bool(arg) and not arg.startswith("-") and not os.path.isabs(arg) and os.path.exists(folder / arg)


def _secret_in_url(url: Any) -> str:
    """What in a base URL looks secret: a user name or password, or a query parameter named like a
    credential (`?key=...`, `?auth=...`, `?sig=...`: `secret_param`); "" for none (an
    `api-version` is no secret)."""
    if not isinstance(url, str):
        return ""
    parts = urllib.parse.urlsplit(url.strip())
    if "@" in parts.netloc:
        return "a user name or password (user:pw@host)"
    named = [name for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if secret_param(name)]
    return f"a query parameter named like a credential ({named[0]!r})" if named else ""


def _secret_option(options: dict[str, Any], prefix: str = "") -> str | None:
    """The first option that would carry a credential: a name like api_key (not api_key_env), or an
    env entry like OPENAI_API_KEY."""
    for name, value in options.items():
        if isinstance(value, dict) and name == "env":
            found = next((k for k in value if _SECRET_NAME.search(str(k))), None)
            if found:
                return f"{prefix}env.{found}"
        elif _SECRET_NAME.search(name) and not name.endswith("_env"):
            return prefix + name
    return None
