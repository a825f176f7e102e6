"""From a checked spec to the parts of a run: its tasks, target, artifact and strategy.

`materials(spec)` reads what is on disk (the target, the tasks) and builds what runs none of the
user's code; `problems(spec)` is the second check of a spec, against the world, and lists every
problem by field: it checks `python:` refs by importing them in a child process (`refcheck`)
and where the target is (`containment`). What it leaves out: the user's code, imported and
called only in the run's own process (`runs.wiring`, `reward`), running (the runner) and where a run
keeps its files (the store).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdescent import reading, refcheck, userimport
from agentdescent.artifacts import AppendRules, FileTree, SingleSlot, Strategy
from agentdescent.artifacts.copyable import copy_problems
from agentdescent.dataloader import hf_rows, tasks_from
from agentdescent.dataloader.local import file_rows
from agentdescent.dataloader.tasks import check_ids, columns_of, guess_columns
from agentdescent.engine.split import fewest_tasks, good_start
from agentdescent.errors import AgentDescentError, UserError
from agentdescent.governance import (
    BLAST_RADII,
    HARNESS_BLAST_RADIUS,
    MAX_FILE_BYTES,
    PLUGIN_BLAST_RADIUS,
    SKILL_BLAST_RADIUS,
    Layer,
    matching,
)
from agentdescent.quoting import described, quoted
from agentdescent.runs import containment
from agentdescent.runs.agentcheck import agent_problems
from agentdescent.runs.placement import layout_of, name_of, name_problem
from agentdescent.runs.spec import Problem, RunSpec, SpecError, TasksSpec
from agentdescent.runs.store import stored_tasks
from agentdescent.runs.targetread import bracket_hint, has_files, literal_glob, read_folder, unsaved_text
from agentdescent.scoring import GRADER_TIMEOUT, scorer
from agentdescent.types import Task

RADIUS_OF_KIND = {"skill_dir": SKILL_BLAST_RADIUS, "agent_dir": HARNESS_BLAST_RADIUS, "plugin": PLUGIN_BLAST_RADIUS}
PLUGIN_AGENTS = ("claude_code", "host", "python")  # the agents a plugin's rollouts can load it into


@dataclass(frozen=True, kw_only=True)
class Materials:
    """What a spec names, read and built: everything of a run but its reward and its agents, which
    may be the user's code and are built in the run's own process only (`reward`, `callables`)."""

    kind: str  # text, skill_dir or agent_dir
    content: str | dict[str, str]  # the target as read: a text, or a folder as {relative path: text}
    tasks: list[Task]
    strategy: Strategy
    blast_radius: Mapping[str, Layer] | None
    tree: dict[str, str] | None  # folder targets: the folder as read
    layout: str | None
    name: str | None
    assets: Mapping[str, bytes] = field(default_factory=dict)  # a folder's files that are not text, carried as they are
    executable: frozenset[str] = frozenset()  # a folder's files with an execute bit, staged so in each rollout


def target_kind(spec: RunSpec) -> str:
    """The spec's kind, or the one its target's shape says."""
    if spec.kind is not None:
        return spec.kind
    target = Path(spec.target)
    if not target.is_dir():
        return "text"
    if (target / ".claude-plugin" / "plugin.json").is_file():
        return "plugin"
    return "skill_dir" if (target / "SKILL.md").is_file() else "agent_dir"


def load_tasks(spec: RunSpec, rows: list[dict] | None = None) -> list[Task]:
    """The spec's tasks: inline, or its rows (`task_rows`, read now unless given) mapped by its columns."""
    source = spec.tasks
    if source.inline is not None:
        check_ids(source.inline, listed=True)  # as a tasks file's are
        blank = [task.id for task in source.inline if not task.prompt.strip()]
        if blank:  # as a file's empty prompt cells are: the agent would be asked nothing
            raise UserError(f"{len(blank)} of the tasks have an empty prompt (the first: {reading.name_or_count(blank[0])}); "
                            "give each its request")
        return list(source.inline)
    rows = task_rows(source) if rows is None else rows
    return tasks_from(rows, prompt=source.prompt, gold=_column(source, "gold", rows), id=_column(source, "id", rows))


def task_rows(source: TasksSpec) -> list[dict]:
    """The rows of a tasks file or dataset, as read; a file of another kind is a `UserError`."""
    if source.file is not None:
        return rows_of_file(source.file, limit=source.limit)
    if source.hf is None:
        raise UserError("the tasks are inline: they have no rows to read (load_tasks takes them as they are)")
    return hf_rows(source.hf, source.split, config=source.config, limit=source.limit)


def rows_of_file(path: str | os.PathLike, *, limit: int | None = None) -> list[dict]:
    """The rows of a tasks file, read by its suffix (`dataloader.local.file_rows`)."""
    return file_rows(path, limit=limit)


def mapping_fix(source: TasksSpec, rows: list[dict]) -> str | None:
    """When no row has a column the spec names for the prompt, the gold or the id: that, and the
    spec's `tasks:` with the columns the rows seem to hold, e.g. "...; say which column is which:
    tasks: {file: ..., prompt: request, gold: team}". None when every named column is in some row
    (rows that lack one are named by `tasks_from`)."""
    if not rows or not isinstance(rows[0], dict):
        return None
    named = {"prompt": source.prompt, "gold": _column(source, "gold", rows), "id": _column(source, "id", rows)}
    missing = [(role, name) for role, name in named.items() if name and "{" not in name
               and not any(name in row for row in rows if isinstance(row, dict))]
    if not missing:
        return None
    guess = guess_columns(rows)  # the file's column names are outside text: quoted, or written as YAML strings
    columns = columns_of(rows)
    shown = quoted(", ".join(c[:40] for c in columns[:12]) + (", ..." if len(columns) > 12 else ""), 600)
    parts = [f"prompt: {_as_yaml(guess.prompt)}", f"gold: {_as_yaml(guess.gold)}"]
    if guess.id != "id" and (guess.id or "id" in columns):  # a column "id" is the spec's id unless it says another
        parts.append(f"id: {_as_yaml(guess.id) if guess.id else 'null'}")
    where = "file" if source.file is not None else "hf"
    role, name = missing[0]
    return (f"the tasks have no column {name!r} for the {role} (their columns: {shown}); say which column is "
            f"which: tasks: {{{where}: ..., {', '.join(parts)}}}")


def _as_yaml(column: str | None) -> str:
    """A column name as a spec's YAML takes it: bare when it is a plain name, else a quoted string
    with every control character escaped; COLUMN where none was guessed."""
    if column is None:
        return "COLUMN"
    return column if reading.looks_like_a_name(column) else json.dumps(column[:60])


def _column(source: TasksSpec, name: str, rows: list[dict]) -> str | None:
    """The column the spec names for `name`; a default ("gold", "id") the rows lack is no column,
    while one the spec set explicitly stays, so that its absence is an error naming it."""
    value = getattr(source, name)
    if value is None or name in source.model_fields_set or "{" in value:
        return value
    return value if any(isinstance(row, dict) and value in row for row in rows) else None  # not the first row's alone


def materials(spec: RunSpec) -> Materials:
    """Read the target and the tasks, try the scorer on the first task, and build the strategy;
    raises `SpecError` with every problem found. Runs none of the user's code here (refs are
    checked, and a `python:` scorer tried, in a child process)."""
    assets: dict[str, bytes] = {}
    executable: set[str] = set()
    tried: dict[str, str | None] = {}
    found, tasks, content = _world(spec, assets, executable, tried)
    if found:
        raise SpecError(found)
    found = scorer_problems(spec, tasks[0], tried) + _gold_problems(tasks)
    if found:
        raise SpecError(found)
    assert content is not None  # read, or a problem above says why not
    return assemble(spec, tasks, content, assets, executable)


def scorer_problems(spec: RunSpec, task: Task, tried: Mapping[str, str | None]) -> list[Problem]:
    """The scorer tried once, on `task` with its gold answer as the output (empty when it has
    none): one that raises would fail every rollout of the run, one that returns anything but a
    number in [0, 1] would stop it at its first rollout (any number in range is fine).
    A `python:` scorer is called in a child process, never here: the one that checked the refs,
    whose verdict `tried["scorer"]` holds; a built-in one or a grader command is called here."""
    output, chosen = task.gold or "", spec.scorer
    if chosen.ref is not None:
        said = tried["scorer"]
        how = " (it is called as fn(task, output), task a Task with .prompt and .gold)"
    else:
        how = ""
        try:
            reward(spec)(task, output)
            said = None
        except (AgentDescentError, OSError) as exc:
            said = str(exc)
    if said is None:
        return []
    return [Problem(field="scorer", message=f"it failed when tried on the first task ({reading.name_or_count(task.id)}), "
                                            f"its gold answer as the output{how}: {said}")]


def _gold_problems(tasks: list[Task]) -> list[Problem]:
    """Tasks with a gold answer beside tasks without one (a null, an empty or blank cell in the gold
    column): a scorer that compares with it fails on those, mid-run, and no output matches a blank one."""
    missing = [task.id for task in tasks if task.gold is None or not task.gold.strip()]
    if not missing or len(missing) == len(tasks):
        return []
    return [Problem(field="tasks", message=f"{len(missing)} of the {len(tasks)} tasks have no gold answer (the first: "
                                           f"{reading.name_or_count(missing[0])}) while the others do; give each one "
                                           "(an empty cell is none), or leave those rows out")]


def problems(spec: RunSpec) -> list[Problem]:
    """Every way the spec does not fit the world: a missing target, unloadable or too few tasks,
    a frozen glob that matches no file, an agent that is not installed, a ref that does not import
    (in a child process), a target where no run may be (`containment`)."""
    return _world(spec, {})[0]


def _world(spec: RunSpec, assets: dict[str, bytes], executable: set[str] | None = None,
           tried: dict[str, str | None] | None = None) -> tuple[list[Problem], list[Task], str | dict[str, str] | None]:
    """`problems(spec)`, and the tasks and the target as it read them, each read once (none when
    they would not load); a folder's files that are not text go in `assets`, the keys of those
    with an execute bit in `executable`; given `tried`, a `python:` scorer's try (none for a spec refused already)."""
    found: list[Problem] = []
    content = None
    target = Path(spec.target)
    too_long = reading.path_too_long(target)  # before any look-up, which would raise it
    kind = "text" if too_long else target_kind(spec)
    refused = containment.refusal(target) if not too_long and os.path.lexists(target) else None
    if too_long:
        found.append(Problem(field="target", message=too_long))
    elif not os.path.lexists(target):
        found.append(Problem(field="target", message=f"{target} does not exist; give a folder or a text file"))
    elif refused is not None:
        found.append(Problem(field="target", message=refused))
    elif kind == "text" and not target.is_file():
        found.append(Problem(field="target", message=f"{target} is a folder; a text target is one file (or set kind: skill_dir)"))
    elif kind != "text" and not target.is_dir():
        found.append(Problem(field="target", message=f"{target} is a file; a {kind} target is a folder"))
    else:
        target_problems, content = _target_problems(spec, assets, executable)
        found += target_problems
    task_problems, tasks = _task_problems(spec)
    found += task_problems
    for which, agent in (("agent", spec.agent), ("reflector", spec.reflector)):
        if agent is not None:
            found += [Problem(field=which, message=m) for m in agent_problems(agent)]
    if kind == "plugin" and spec.agent.kind not in PLUGIN_AGENTS:
        found.append(Problem(field="agent", message=f"a plugin's rollouts load the candidate into Claude Code "
                                                    f"(claude --plugin-dir): use agent: claude_code, host or python:, "
                                                    f"not {spec.agent.kind}"))
    return found + _executor_problems(spec) + _ref_problems(spec, tasks, None if found else tried), tasks, content


def _target_problems(spec: RunSpec, assets: dict[str, bytes], executable: set[str] | None = None,
                     ) -> tuple[list[Problem], str | dict[str, str] | None]:
    """What is wrong with the target, and its content as read (None when it would not read). What
    keeps a backup from copying the target comes first: leaving such a file out of the run (the
    way out a file the run cannot read is shown) would not let `accept` write the result back."""
    uncopyable = copy_problems(Path(spec.target))
    if uncopyable:
        return [Problem(field="target", message=f"accept would not be able to write a result back: {problem}")
                for problem in uncopyable], None
    try:
        content = read_target(spec, assets, executable)
    except UserError as exc:
        return [Problem(field="target", message=str(exc))], None
    if isinstance(content, str):
        return ([Problem(field="frozen", message="frozen globs are for folder targets")] if spec.frozen else []), content
    if not content and not assets and spec.exclude and has_files(spec.target):  # frozen's problems would follow from it
        return [Problem(field="exclude", message=f"it leaves out every file of {spec.target} ({spec.exclude[:3]!r}), "
                        "so a run would have nothing to evolve; exclude only what a run should not see")], content
    found = [Problem(field=f"frozen[{i}]", message=f"{glob!r} matches no file of {spec.target}; "
                                                    f"{bracket_hint(glob, content) or 'its files are ' + ', '.join(sorted(content)[:8])}")
             for i, glob in enumerate(spec.frozen) if not any(matching(path, [glob]) for path in content)]
    found += [Problem(field="name", message=said) for said in [name_problem(spec, target_kind(spec), content)] if said]
    root, tasks = Path(spec.target).resolve(), Path(spec.tasks.file).resolve() if spec.tasks.file else None
    inside = tasks.relative_to(root).as_posix() if tasks and tasks.is_relative_to(root) else None
    if inside in content:  # its gold answers in every rollout's workspace, and a change may edit them
        found.append(Problem(field="tasks.file", message=f"{spec.tasks.file} is inside the target, so its gold answers "
                             f"would reach every rollout and a change could edit them: move it out of {spec.target}, or "
                             f"add {inside!r} to exclude"))
    return found, content


def _task_problems(spec: RunSpec) -> tuple[list[Problem], list[Task]]:
    """What is wrong with the spec's tasks, and the tasks as loaded (read once: a dataset may be remote)."""
    where = "tasks.file" if spec.tasks.file else "tasks.hf" if spec.tasks.hf else "tasks"
    rows = None
    try:
        rows = None if spec.tasks.inline is not None else task_rows(spec.tasks)
        tasks = load_tasks(spec, rows)
    except AgentDescentError as exc:
        return [Problem(field=where, message=(rows and mapping_fix(spec.tasks, rows)) or str(exc))], []
    try:
        stored_tasks(tasks)
    except UserError as exc:
        return [Problem(field=where, message=str(exc))], tasks
    fewest = fewest_tasks(spec.held_out_frac, spec.policies.build().acceptance)
    if len(tasks) < fewest:
        return [Problem(field=where, message=f"{len(tasks)} tasks; a run needs at least {fewest} (some held out, enough "
                                             f"left to judge a change on), and {good_start(spec.held_out_frac)} is a good "
                                             "start")], tasks
    return [], tasks


def _executor_problems(spec: RunSpec) -> list[Problem]:
    """What a process or Ray executor cannot do: send the host to other processes (it answers
    through this run's own), or run without Ray. The `python:` refs it sends are tried apart
    (`_ref_problems`); the library's own agents, reflectors and scorers all travel."""
    executor = spec.parallelism.executor
    if executor != "thread" and "host" in (spec.agent.kind, spec.reflector_spec.kind):
        return [Problem(field="parallelism.executor", message=f"executor {executor!r} sends the agent and the reflector "
                        "to other processes, and the host answers only through the run's own process; use executor: "
                        "thread (the default) with the host")]
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        return [Problem(field="parallelism.executor", message='executor: ray needs Ray: pip install "agentdescent[ray]"')]
    return []


def _ref_problems(spec: RunSpec, tasks: list[Task], tried: dict[str, str | None] | None) -> list[Problem]:
    """The `python:` refs that do not load (or, for a process or Ray executor, do not pickle), all imported in one
    child process started here, where the run's process starts too (never in this process: it may be the MCP
    server); given `tried`, that child tries a `python:` scorer on the first task too (`tried["scorer"]`)."""
    executor, scorer = spec.parallelism.executor, spec.scorer.ref
    refs = {field: agent.ref for field, agent in (("agent", spec.agent), ("reflector", spec.reflector))
            if agent is not None and agent.kind == "python" and agent.ref} | ({"scorer.ref": scorer} if scorer else {})
    call = (scorer, tasks[0].model_dump(mode="json"), tasks[0].gold or "") if scorer and tasks and tried is not None else None
    said, called = refcheck.check(list(refs.values()), call=call, cwd=os.getcwd(), executor=executor)
    if call is not None and tried is not None:
        tried["scorer"] = called
    return [Problem(field=field, message=f"executor {executor!r} sends {ref!r} to other processes, and {why}; make it a "
                    "function or a class at the top of its module (not a lambda, nor an object holding a lock or a "
                    "client), or use executor: thread" if why.startswith(refcheck.UNPICKLABLE) else f"{ref!r} was {why}"
                    if why.startswith(refcheck.NOT_CHECKED) else
                    f"cannot load {ref!r}; make it importable from {os.getcwd()}, where the run starts: {why}")
            for field, ref in refs.items() if (why := said[ref]) is not None]


def resolve_ref(ref: str) -> Any:
    """The object `module:attribute` names, the module imported now from the current folder (where
    the run's process works too) when it holds it, else from what is installed (`userimport`). This
    runs the user's code: only the run's own process calls it (`problems` checks refs in a child process)."""
    module_name, _, attribute = ref.partition(":")
    try:
        module = userimport.import_named(module_name, os.getcwd())
        return functools.reduce(getattr, attribute.split("."), module)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(f"cannot load {ref!r}: {type(exc).__name__}: {exc}; check the module is importable "
                        "from the folder the run starts in") from None
    except Exception as exc:  # noqa: BLE001 -- the module's own code raised as it was imported
        raise UserError(f"cannot load {ref!r}: importing it raised {described(exc)}; fix the module (plan checks "
                        "it loads)") from None


def read_target(spec: RunSpec, assets: dict[str, bytes] | None = None, executable: set[str] | None = None) -> str | dict[str, str]:
    """The target as it is now: a text file's text exactly as on disk (strict UTF-8, line endings
    kept, at most `MAX_FILE_BYTES`, never through a symlink), or a folder as {relative path: text},
    its files that are not text put in `assets` (an image, a template: carried, never changed)."""
    kind = target_kind(spec)
    if kind == "text":
        return reading.read_text(spec.target, what="text target", limit=MAX_FILE_BYTES, follow_symlinks=False)
    assets = {} if assets is None else assets
    content = read_folder(spec.target, spec.exclude, assets, executable)
    if kind == "skill_dir" and "SKILL.md" in assets:
        raise UserError(f"its SKILL.md is {reading.not_text(assets['SKILL.md'])}, and a skill's SKILL.md is the text a "
                        "run changes: save it as UTF-8")
    if not content and assets:
        said = unsaved_text(assets)
        raise UserError(f"none of its {len(assets)} files is UTF-8 text, so a run would have nothing to change"
                        f"{': ' + said[0] if said else '; give a folder of text files'}")
    return content


def assemble(spec: RunSpec, tasks: list[Task], content: str | dict[str, str],
             assets: Mapping[str, bytes] | None = None, executable: Iterable[str] = ()) -> Materials:
    """The materials of a run from its spec, its tasks and its target's content (and a folder's
    files that are not text), all as stored when the run was made (so a resumed run is the same
    run, whatever the disk holds now)."""
    kind = target_kind(spec)
    if isinstance(content, str):
        strategy: Strategy = (SingleSlot(content, name=Path(spec.target).name) if spec.strategy == "single"
                              else AppendRules.under(content))
        return Materials(kind="text", content=content, tasks=tasks, strategy=strategy,
                         blast_radius=None, tree=None, layout=None, name=None)
    # what the run did not read is not its to write: an excluded file, one not text, a skipped folder
    strategy = FileTree(content, max_files_per_diff=spec.max_files_per_diff, editable=spec.editable, frozen=spec.frozen,
                        left_out=(*spec.exclude, *(literal_glob(key) for key in assets or {})))
    radius = spec.blast_radius
    blast = BLAST_RADII[radius] if isinstance(radius, str) else radius if radius is not None else RADIUS_OF_KIND[kind]
    return Materials(kind=kind, content=content, tasks=tasks, strategy=strategy, blast_radius=blast, tree=dict(content),
                     layout=layout_of(spec, kind), name=name_of(spec, content), assets=assets or {},
                     executable=frozenset(executable))


def reward(spec: RunSpec) -> Callable[[Task, str], float]:
    """The run's reward: a built-in scorer, a grader command, or the user's function (imported now,
    so only the run's own process calls this)."""
    chosen = spec.scorer
    if chosen.ref is not None:
        return resolve_ref(chosen.ref)
    if chosen.command is not None:
        return scorer(command=chosen.command, timeout=GRADER_TIMEOUT if chosen.timeout is None else chosen.timeout)
    return scorer(chosen.name, pattern=chosen.pattern, tolerance=chosen.tolerance)
