"""Run specs: what a run evolves, on which tasks, with which agent, for how much, as checked data.

A spec is read from JSON or YAML (`read_spec`), or handed over as a mapping (the MCP server), and
checked in two passes before anything runs: the schema (pydantic: every field's type and range),
then the world (`problems`: the target exists and is of its kind, the tasks load and are enough,
the frozen globs match files, the agents exist). Every problem is listed by field in one
`SpecError`. Relative paths are read against the spec file's folder (or the caller's `base`),
and a checked spec holds only absolute ones, so the run store can keep it as it is.

    target: my-skill/                    # a folder (skill_dir, agent_dir) or a text file (text)
    tasks: {file: tasks.jsonl, prompt: request, gold: expected}
    scorer: exact
    agent: claude_code                   # or openai:gpt-4o-mini, claude:claude-sonnet-4-5, host, python:pkg.mod:fn
    reflector: claude:claude-sonnet-4-5
    workers: 4
    rounds: 8
    max_calls: 400
    frozen: ["hooks/*"]

Left out: building the run's callables from a spec (`build`) and what a run costs (`quote`).
Keys never go in a spec: options that would hold one are refused, and the clients read them
from the environment at call time.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentdescent.artifacts.workspace import LAYOUTS
from agentdescent.errors import UserError
from agentdescent.governance import Layer
from agentdescent.scoring import SCORER_NAMES
from agentdescent.types import Task

AgentKind = Literal["openai", "deepseek", "claude", "claude_code", "codex", "host", "python"]
MODEL_KINDS = ("openai", "deepseek", "claude")  # HTTP models: text in, text out
CLI_KINDS = ("claude_code", "codex")  # agents that work in a folder
TargetKind = Literal["text", "skill_dir", "agent_dir", "plugin"]
_SECRET_NAME = re.compile(r"(key|token|secret|password|credential)$", re.IGNORECASE)
_STRICT = ConfigDict(extra="forbid")


class Problem(BaseModel):
    """One thing wrong with a spec: the field (dotted, as written in the spec) and what to do."""

    field: str
    message: str


class SpecError(UserError):
    """A spec that cannot run; `problems` lists every one, by field."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p.field}: {p.message}" for p in problems)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"the run spec has {len(problems)} {noun}:\n{lines}")


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
        if self.kind in MODEL_KINDS and not self.model and self.kind != "deepseek":
            raise ValueError(f"a {self.kind} agent needs a model name, e.g. '{self.kind}:<model>'")
        if self.kind == "python" and (not self.ref or ":" not in self.ref):
            raise ValueError("a python agent needs ref='module:attribute', e.g. 'python:my_agents:answer'")
        secret = _secret_option(self.options)
        if secret:
            raise ValueError(f"options.{secret} looks like a credential: keys never go in a spec. Set it in the "
                             "environment (the clients read OPENAI_API_KEY, ANTHROPIC_API_KEY, DEEPSEEK_API_KEY, "
                             "or the variable named by options.api_key_env)")
        return self

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.model or self.ref}" if (self.model or self.ref) else self.kind


class TasksSpec(BaseModel):
    """Where the tasks come from: inline, a local file (.jsonl, .csv, .json), or a Hugging Face
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
            raise ValueError("give exactly one of inline (a list of tasks), file (a .jsonl, .csv or .json path) "
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
            raise ValueError(f"unknown scorer {self.name!r}; choose one of {', '.join(SCORER_NAMES)}")
        return self


class RunSpec(BaseModel):
    """Everything a run needs, checked. See the module docstring for an example."""

    model_config = _STRICT

    target: str
    kind: TargetKind | None = None  # None: a file is text; a folder with .claude-plugin/plugin.json a plugin,
    # with SKILL.md a skill_dir, else an agent_dir
    tasks: TasksSpec
    scorer: ScorerSpec = Field(default_factory=lambda: ScorerSpec(name="exact"))
    agent: AgentSpec
    reflector: AgentSpec | None = None  # None: the agent, when it is a model or the host
    workers: int = Field(default=4, ge=1, le=64)
    rounds: int = Field(default=8, ge=1, le=10_000)
    max_calls: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    price_per_call: float | None = Field(default=None, ge=0)  # in USD, for the quote
    price_per_1k_tokens: float | None = Field(default=None, ge=0)
    target_reward: float | None = Field(default=None, ge=0, le=1)
    patience: int | None = Field(default=None, ge=1)
    seed: int = 0
    held_out_frac: float = Field(default=0.3, ge=0, lt=1)
    strategy: Literal["single", "append"] = "single"  # text targets: lines appended, or a playbook of rules
    frozen: list[str] = Field(default_factory=list)  # folder targets: globs of files no diff may touch
    editable: list[str] = Field(default_factory=lambda: ["**"])
    blast_radius: Literal["skill", "harness", "plugin"] | dict[str, Layer] | None = None  # None: by kind
    layout: str | None = None  # folder targets: where the host reads the folder (None: by kind)
    name: str | None = None  # the skill's name for the skill layouts (None: the folder's name)
    max_files_per_diff: int = Field(default=2, ge=1)
    self_verify: bool = False
    cheap_eval_tasks: int | None = Field(default=4, ge=1)
    rollout_timeout: float | None = Field(default=None, gt=0)
    host_timeout: float = Field(default=1800, gt=0)  # seconds a host-driven rollout or proposal may wait
    prompt: str | None = None  # what the agent is asked per task; {task} is the task's prompt
    keys_in_target: Literal["refuse", "mask"] = "refuse"  # a key's value in the target or tasks (runs.keys)

    @field_validator("layout")
    @classmethod
    def _known_layout(cls, value: str | None) -> str | None:
        if value is not None and value not in LAYOUTS:
            raise ValueError(f"unknown layout {value!r}; choose one of {', '.join(LAYOUTS)}")
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
        path = Path(source)
        data, folder = _read_file(path), path.absolute().parent
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_problem(error) for error in exc.errors()]) from None
    return _absolute(spec, folder)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([Problem(field="spec", message=f"cannot read {path}: {exc.strerror or exc}")]) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SpecError([Problem(field="spec", message=f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                                                        f"{str(exc).splitlines()[0]}")]) from None
    if not isinstance(data, dict):
        raise SpecError([Problem(field="spec", message=f"{path} must hold a mapping of fields (target, tasks, agent, ...)")])
    return data


def _problem(error: dict) -> Problem:
    where = ".".join(str(part) for part in error["loc"] if not str(part).startswith(("function-", "tagged-"))) or "spec"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "is not a field of a run spec (check its spelling)"
    elif error["type"] == "missing":
        message = "is required"
    return Problem(field=where, message=message)


def _absolute(spec: RunSpec, folder: Path) -> RunSpec:
    def resolved(path: str) -> str:
        return os.path.normpath((folder / os.path.expanduser(path)).absolute())

    tasks = spec.tasks.model_copy(update={"file": resolved(spec.tasks.file)}) if spec.tasks.file else spec.tasks
    return spec.model_copy(update={"target": resolved(spec.target), "tasks": tasks})


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
