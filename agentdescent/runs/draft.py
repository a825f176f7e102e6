"""A first run spec, drafted from a target and a tasks file: what `agentdescent init` writes.

`draft(target, tasks)` writes `<target's name>.agentdescent.yaml` beside the target, a YAML
spec with a comment on every field, so that a shell user starts from a folder and a tasks file
with nothing to write by hand:

    draft("my-skill", "tasks.jsonl")   # my-skill.agentdescent.yaml: target, tasks, scorer, agent, budget, ...

It reads the tasks file's rows and names the columns that look like the prompt, the gold answer
and the id (`dataloader.guess_columns`); it chooses the agent from what `doctor` reports, read
the same way (the PATH and the environment, without running anything): a CLI agent found on the
PATH, else a model whose key (or endpoint) is set (the one `AGENTDESCENT_MODEL` names, as the
examples read it; a model name guessed for another server than the provider's is warned of), else
the host. It holds out the default share of
the tasks, or of a large file no more than measure a version (`quote.ENOUGH_HELD_OUT`), and gives
the workers and the budget that split feeds. An existing spec is never overwritten unless `force`.
Every text is written as a double-quoted, escaped YAML scalar, so a path or a column name is data
in the YAML, whatever it holds.

`cheaper_than_host(agent, reflector)` is plan's warning, read the same way, when a spec has the
host do the rollouts or reflections while this machine has a path that spends none of its requests.

Left out: checking the spec against the world (`plan` does, and names every problem by field).
"""

from __future__ import annotations

import math
import os
import shutil
import urllib.parse
from pathlib import Path

from pydantic import BaseModel, Field

from agentdescent import atomic, quoting, reading
from agentdescent.agents.providers import CLI_KINDS, MODEL_KINDS, PROVIDERS
from agentdescent.artifacts.workspace import skill_name
from agentdescent.commands import command
from agentdescent.config import DEFAULTS
from agentdescent.dataloader.tasks import Columns, columns_of, guess_columns
from agentdescent.engine.calls.smallest import MINIBATCH, Sizes, fraction_within
from agentdescent.engine.split import FEW_HELD_OUT, fewest_tasks, good_start, held_out_count
from agentdescent.errors import UserError
from agentdescent.governance import MAX_FILE_BYTES
from agentdescent.reading import read_text
from agentdescent.runs import containment
from agentdescent.runs.build import PLUGIN_AGENTS, rows_of_file
from agentdescent.runs.placement import PROJECT_FILES
from agentdescent.runs.quote import ENOUGH_HELD_OUT, low_end, plain, too_coarse

SUFFIX = ".agentdescent.yaml"
MODELS = {"claude": "claude-sonnet-4-5", "openai": "gpt-4o-mini"}  # a provider's model to start from, when it has no default
MODEL_VARIABLE = "AGENTDESCENT_MODEL"  # the model a model agent is drafted with, as the examples and quickstarts read it
LEAST_BUDGET = 400  # max_calls a drafted spec gives at least
SHOWN_COLUMNS = 12


class Draft(BaseModel):
    """The spec `draft` wrote, and what it chose."""

    path: str  # the spec file, as the caller would type it
    target: str
    tasks: str | None  # the tasks file, as the spec names it (None: the spec names one still to write)
    rows: int | None
    columns: list[str]  # the tasks file's columns, as its first rows have them
    prompt: str | None  # the columns chosen for each part of a task
    gold: str | None
    id: str | None
    agent: str
    reflector: str = ""  # "" where it is the agent
    why: str  # why that agent
    next: str
    notes: list[str] = Field(default_factory=list)  # what init chose that the user would not expect
    warnings: list[str] = Field(default_factory=list)  # what plan would refuse or the user should know, said now


def spec_path(target: str | os.PathLike) -> Path:
    """Where the spec of `target` goes: spec_path("skills/my-skill") == Path("skills/my-skill.agentdescent.yaml")"""
    whole = Path(os.path.abspath(target))  # `.` is the folder this shell is in: its spec goes beside it, not in it
    path = whole.parent / f"{whole.name}{SUFFIX}"
    return path if Path(target).is_absolute() else Path(os.path.relpath(path))


def draft(target: str | os.PathLike, tasks: str | os.PathLike | None = None, *, force: bool = False) -> Draft:
    """Write a first spec for `target` (and `tasks`) beside the target; raises `UserError` for a
    target that is not there, a tasks file that does not load, or a spec already written (unless
    `force`)."""
    target = Path(target)
    if not target.exists():
        raise UserError(f"{target} does not exist; give the folder or the text file to improve")
    refused = containment.refusal(target)  # what plan would refuse, before a spec is written for it
    if refused:
        raise UserError(refused)
    _utf8(_name(target), "folder" if target.is_dir() else "file")
    if not target.is_dir():  # as the run reads it: a file saved as UTF-16 is refused here, not once the spec is written
        read_text(target, what="text target", limit=MAX_FILE_BYTES, follow_symlinks=False)
    path = spec_path(target)
    if path.exists() and not path.is_file():
        raise UserError(f"{path}, where the spec of {_name(target)} goes, is a folder (or another thing that is not a "
                        "file); move it away, then init again")
    if path.exists() and not force:
        raise UserError(f"{path} already exists; plan it ({command('plan', path)}), or write it again with "
                        f"{command('init', target, *([tasks] if tasks else []), '--force')}")
    folder = path.parent.absolute()
    rows = rows_of_file(tasks) if tasks is not None else []
    if tasks is not None and not rows:
        raise UserError(f"{tasks} holds no rows; write one task a line: {{\"id\": ..., \"prompt\": ..., \"gold\": ...}}")
    columns = columns_of(rows)
    guess = guess_columns(rows) if rows else None
    named = os.path.relpath(Path(tasks).absolute(), folder) if tasks is not None else f"{_name(target)}.tasks.jsonl"
    _utf8(named, "tasks file")
    agent, reflector, why = choose_agent(plugin=(target / ".claude-plugin" / "plugin.json").is_file())
    frac = _held_out_frac(len(rows))
    workers = _workers(len(rows), frac) if rows else DEFAULTS.n_workers
    budget = _budget(len(rows), workers, frac) if rows else LEAST_BUDGET
    lines = _spec_lines(target, folder, named, columns, guess, agent, reflector, why, workers, budget,
                        held_out=_held_out_line(len(rows), frac), hidden=_inside(tasks, target))
    atomic.write_text(path, "\n".join(lines) + "\n")
    todo = "" if tasks is not None else f"write the tasks in {folder / named} (one JSON object a line), then "
    shown = str(target) if target.name not in ("", ".", "..") else os.path.abspath(target)
    warnings = _few_rows(tasks, len(rows), frac) if rows else []
    warnings += _guessed_model(agent)
    if guess is not None and guess.gold is None:
        warnings.append("no column of the tasks reads as the expected answer (gold): name one in the spec's tasks: "
                        "(gold: COLUMN), or score with a grader (scorer: {command: [...]}) instead of exact")
    warnings += guess.warnings if guess is not None else ()
    return Draft(path=str(path), target=shown, tasks=named if tasks is not None else None,
                 rows=len(rows) if tasks is not None else None, columns=columns,
                 prompt=guess.prompt if guess else None, gold=guess.gold if guess else None,
                 id=guess.id if guess else None, agent=agent, reflector="" if reflector == agent else reflector,
                 why=why, warnings=warnings, notes=_held_out_notes(len(rows), frac),
                 next=f"{todo}{command('plan', path)} checks it and quotes the run")


def _utf8(name: str, what: str) -> None:
    """Refuse a `name` the system gave in bytes that are not UTF-8 (held as lone surrogates): no
    spec can hold it, and the plan command init suggests could not be pasted."""
    if reading.surrogate_at(name) is not None:
        raise UserError(f"the {what} {quoting.quoted(name)} holds a name that is not UTF-8 text (its odd bytes shown "
                        "escaped), which a run spec cannot hold; rename the folder or file of that name to UTF-8 text, "
                        "then init again")


def _name(target: Path) -> str:
    """The target's own name, `.` and `..` resolved: init . in proj/ drafts a spec for proj."""
    return Path(os.path.abspath(target)).name


def _inside(tasks: str | os.PathLike | None, target: Path) -> str | None:
    """The tasks file's path inside a folder target, when it is there: its gold answers must be
    kept from the rollouts (excluded), or they would read them in the workspace and the run edit them."""
    if tasks is None or not target.is_dir():
        return None
    inner = os.path.relpath(os.path.abspath(tasks), os.path.abspath(target))
    return None if inner.startswith("..") else Path(inner).as_posix()


def choose_agent(*, plugin: bool = False) -> tuple[str, str, str]:
    """(agent, reflector, why): a CLI agent on the PATH, else a model whose key or endpoint is set,
    else the host, as `doctor` would find them; a `plugin`'s rollouts load it into Claude Code, so
    they are claude_code's where its CLI is on PATH, else the host's."""
    agent, reflector, why = _first_found()
    if plugin and agent not in PLUGIN_AGENTS:
        agent = "claude_code" if shutil.which(PROVIDERS["claude_code"].program or "claude") else "host"
        why += f"; a plugin's rollouts load it into Claude Code, so {agent} does them"
    return agent, reflector, why


def _first_found() -> tuple[str, str, str]:
    for kind in CLI_KINDS:
        program = PROVIDERS[kind].program or kind
        if shutil.which(program):
            return kind, kind, f"the {program} CLI is on PATH"
    for kind in MODEL_KINDS:
        row = PROVIDERS[kind]
        found = next((v for v in (row.key_variable, row.base_url_variable) if v and os.environ.get(v)), None)
        if found:
            named = os.environ.get(MODEL_VARIABLE, "").strip()
            model = named or row.default_model or MODELS.get(kind)
            label = f"{kind}:{model}" if model else kind
            return label, label, f"{found} is set" + (f" and {MODEL_VARIABLE} names the model" if named else "")
    return "host", "host", ("no agent CLI is on PATH and no model key is set; with host, your coding agent "
                            "does the rollouts through the MCP tools")


def _guessed_model(agent: str) -> list[str]:
    """A warning when `agent` is a model whose name init chose while its provider's base URL
    variable points at another server than the provider's, which may not serve that name."""
    kind, _, model = agent.partition(":")
    row = PROVIDERS.get(kind)
    if row is None or row.kind != "http" or not row.base_url_variable or os.environ.get(MODEL_VARIABLE, "").strip():
        return []
    base, usual = os.environ.get(row.base_url_variable, "").strip(), _host(row.default_base_url or "")
    if not base or _host(base) == usual:
        return []
    return [f"the model name {model} is a guess: {row.base_url_variable} points at another server than {usual}, which "
            f"may not serve it; write the model your server serves in agent: and reflector: ({kind}:MODEL), or export "
            f"{MODEL_VARIABLE}=MODEL and init again with --force"]


def _host(url: str) -> str:
    """The host a base URL names, lower case; "" where it names none it can be read for:
    _host("https://API.openai.com/v1") == "api.openai.com" """
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:  # an unclosed [ in its host
        return ""


def cheaper_than_host(agent: str, reflector: str, *, plugin: bool = False) -> list[str]:
    """A warning when the host is to do the rollouts or reflections (`host`) while this machine has
    a path that spends none of the host's requests: an agent CLI, or a model whose key is set."""
    found, found_reflector, why = choose_agent(plugin=plugin)
    movable = [(what, role, instead) for what, role, kind, instead in (("rollouts", "agent", agent, found),
               ("reflections", "reflector", reflector, found_reflector)) if kind == "host" and instead != "host"]
    if not movable:
        return []
    blind = " and run each rollout blind to the tasks' answers" if movable[0][0] == "rollouts" else ""
    return [f"the host is to do the {' and '.join(what for what, _, _ in movable)}, which costs this conversation's "
            f"requests and context, but {why}: {' and '.join(f'{role}: {instead}' for _, role, instead in movable)} "
            f"cost{'s' if len(movable) == 1 else ''} none of them{blind}"]


def _held_out(rows: int, frac: float = DEFAULTS.held_out_frac) -> int:
    return held_out_count(rows, frac) if rows > 2 else 1


def _held_out_frac(rows: int) -> float:
    """The default share held out, or, where that holds out more than `ENOUGH_HELD_OUT` tasks, the
    share that holds out at most that many: more would spend the run measuring, not learning."""
    if _held_out(rows) <= ENOUGH_HELD_OUT:
        return DEFAULTS.held_out_frac
    return fraction_within(ENOUGH_HELD_OUT, rows)


def _held_out_line(rows: int, frac: float) -> str:
    line = f"held_out_frac: {plain(frac)}   # the share of tasks held out to measure each version"
    if not rows:
        return line
    line += f" ({_held_out(rows, frac):,} of the {rows:,})"
    return line + (f": {ENOUGH_HELD_OUT} are enough to tell a gain of 0.1 from chance, and each costs a rollout at the "
                   "start and the end" if frac != DEFAULTS.held_out_frac else "")


def _held_out_notes(rows: int, frac: float) -> list[str]:
    if frac == DEFAULTS.held_out_frac:
        return []
    return [f"held out: {_held_out(rows, frac):,} of the {rows:,} tasks (held_out_frac: {plain(frac)}; the default "
            f"{DEFAULTS.held_out_frac:g} would hold out {_held_out(rows):,}): enough to tell a gain of 0.1 from chance, "
            "where every held-out task costs a rollout at the start and at the end"]


def _few_rows(tasks: object, rows: int, frac: float) -> list[str]:
    """What plan would refuse or warn of in so few rows, in its words."""
    fewest = fewest_tasks(frac, DEFAULTS.policies.build().acceptance)
    if rows < fewest:
        return [f"{tasks} holds {rows} row(s): a run needs at least {fewest} (some held out, enough left to judge a "
                f"change on), and {good_start(frac)} is a good start; add rows before plan"]
    held_out = _held_out(rows, frac)
    if held_out < FEW_HELD_OUT:
        return [f"{tasks} holds {rows} rows, of which {held_out} {'is' if held_out == 1 else 'are'} held out: {too_coarse(held_out, frac)}"]
    return []


def _workers(rows: int, frac: float) -> int:
    """The default workers, fewer where the train tasks do not fill each one's minibatch."""
    return max(1, min(DEFAULTS.n_workers, (rows - _held_out(rows, frac)) // MINIBATCH))


def _budget(rows: int, workers: int, frac: float) -> int:
    """max_calls for `rows` tasks: twice the quote's low end at the default settings and `frac`, in hundreds."""
    held_out = _held_out(rows, frac)
    sizes = Sizes.of(DEFAULTS.policies, train=max(1, rows - held_out), held_out=held_out, workers=workers)
    low = low_end(sizes, DEFAULTS.rounds)
    return max(LEAST_BUDGET, math.ceil(2 * low / 100) * 100)


def quoted(value: str) -> str:
    """`value` as a double-quoted YAML scalar, every character outside printable ASCII escaped, so
    that a path or a column name is data whatever it holds: quoted("x: y # z") == '"x: y # z"'"""
    import yaml  # here: only `init` writes a spec; the service's other verbs need no PyYAML

    return yaml.safe_dump(value, default_style='"', width=10**9, allow_unicode=False).removesuffix("\n")


def _as_column(name: str) -> str:
    """A column's name as the tasks mapping reads it: a name with a `{` would read as a format
    string, so its braces are doubled (`dataloader.tasks_from`): _as_column("the {q}") == "the {{q}}" """
    return name.replace("{", "{{").replace("}", "}}") if "{" in name else name


def _skill_name(folder: Path) -> str:
    """The skill's name in its SKILL.md (`artifacts.workspace.skill_name`), the folder's where none is readable."""
    try:
        text = read_text(folder / "SKILL.md", what="skill file", limit=MAX_FILE_BYTES,  # a run reads it so too
                         follow_symlinks=False)  # a link may point anywhere: the run will refuse it
    except UserError:
        return folder.name
    return skill_name(text, folder.name)


def _spec_lines(target: Path, folder: Path, tasks: str, columns: list[str], guess: Columns | None, agent: str,
                reflector: str, why: str, workers: int, budget: int, *, held_out: str,
                hidden: str | None = None) -> list[str]:
    q = quoted
    kind = "a folder" if target.is_dir() else "a text file"
    skill = target.is_dir() and (target / "SKILL.md").is_file()
    mapping = [f"file: {q(tasks)}"]
    if guess is not None:
        mapping += [f"prompt: {q(_as_column(guess.prompt or 'prompt'))}",
                    f"gold: {q(_as_column(guess.gold)) if guess.gold else 'null'}"]
        mapping += [f"id: {q(_as_column(guess.id))}"] if guess.id else ["id: null"] if "id" in columns else []
    shown = ", ".join(q(c) for c in columns[:SHOWN_COLUMNS]) + (", ..." if len(columns) > SHOWN_COLUMNS else "")
    frozen = [glob for glob in ("hooks/*",) if target.is_dir() and any(target.glob(glob))]
    plugin = (target / ".claude-plugin" / "plugin.json").is_file()  # laid out as a plugin, whatever else it holds
    project = [name for name in PROJECT_FILES if target.is_dir() and not skill and not plugin and (target / name).is_file()]
    ask = f"Use the {_skill_name(target)} skill.\n\n{{task}}" if skill else "{task}"
    return [
        f"# A run spec for {q(_name(target))}, drafted by agentdescent init: read it, change what does not fit,",
        "# then plan it (agentdescent plan THIS_FILE). Every field: docs/runs.md, \"A run spec\".",
        "# Relative paths are read from this file's folder.",
        f"target: {q(os.path.relpath(target.absolute(), folder))}   # {kind}{' with SKILL.md: a skill' if skill else ''}",
        *([f"layout: root   # {' and '.join(project)} at its top: a project, each rollout's agent working in a copy of it "
           "(not under .claude/agents/, as a folder of subagents); its .claude/ hooks and .mcp.json servers run there too"]
          if project else []),
        "",
        "# The tasks: which column holds each task's request (prompt), its expected answer (gold) and its id.",
        f"# Columns of the tasks file: {shown}" if columns else
        "# Write them one JSON object a line: {\"id\": \"t1\", \"prompt\": \"...\", \"gold\": \"...\"} "
        f"({good_start(DEFAULTS.held_out_frac).replace('-', ' to ')} to start).",
        f"tasks: {{{', '.join(mapping)}}}",
        "# How an answer is scored: exact, contains, f1, numeric, regex (with pattern), {command: [argv]} for a",
        "# grader, or python:module:function, called as function(task, output) and returning a number in [0, 1].",
        "scorer: exact",
        "",
        f"# Who does each rollout, and who proposes changes: chosen because {why}.",
        "# Others: claude_code, codex, claude:MODEL, openai:MODEL, deepseek, host (your coding agent does the",
        "# rollouts through the MCP tools), or python:module:fn.",
        f"agent: {q(agent)}",
        f"reflector: {q(reflector)}",
        "# What the agent is asked per task; {task} is the task's prompt.",
        f"prompt: {q(ask)}",
        "",
        f"n_workers: {workers}   # workers proposing changes in parallel"
        + ("" if workers == DEFAULTS.n_workers else f" (fewer than {DEFAULTS.n_workers}: each takes {MINIBATCH} train tasks a round)"),
        f"rounds: {DEFAULTS.rounds}",
        held_out,
        f"budget: {{max_calls: {budget}}}   # the most calls the run may make, across every resume",
        "# price_per_call: 0.01   # USD a call, for plan's quote and the calls that report no cost",
        *([f"frozen: [{', '.join(q(g) for g in frozen)}]   # files no change may touch"] if frozen else
          ["# frozen: [\"hooks/*\"]   # folder targets: files no change may touch"]),
        *([f"exclude: [{q(hidden)}]   # the tasks file is inside the target: its gold answers stay out of every "
           "rollout's workspace"] if hidden else []),
    ]
