"""Rows to tasks: `tasks_from` maps each row to a `Task` by column name, format string or callable;
`guess_columns` says which columns of some rows look like the prompt, the gold answer and the id
(what `agentdescent init` writes in a spec, and what a spec naming a missing column is told)."""

from __future__ import annotations

import itertools
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agentdescent import reading
from agentdescent.errors import UserError
from agentdescent.quoting import UNPRINTABLE, quoted
from agentdescent.types import Task

__all__ = ["Columns", "check_ids", "columns_of", "guess_columns", "tasks_from"]

Row = TypeVar("Row", bound=Mapping)  # a row as the loader gave it: a callable is handed that very row
ColumnSpec = str | Callable[[Row], object]  # a column name, a "{column}" format, or a callable of the row
# Column names that usually hold each part of a task, most telling first.
PROMPT_NAMES = ("prompt", "question", "request", "input", "query", "instruction", "problem", "task", "text", "message")
GOLD_NAMES = ("gold", "answer", "expected", "target", "label", "output", "solution", "reference", "response", "category")
ID_NAMES = ("id", "task_id", "uid", "key", "qid")
SAMPLED_ROWS = 50  # rows read to tell a long-text column from a short-answer one
# How rows without ids of their own get some, said for both callers of tasks_from: a spec and Python.
NUMBER_ROWS = "number the rows (a spec: id: null; Python: tasks_from without id)"


def tasks_from(rows: Iterable[Row], *, prompt: ColumnSpec[Row], gold: ColumnSpec[Row] | None = None,
               id: ColumnSpec[Row] | None = None, meta: Sequence[str] | None = None) -> list[Task]:
    """One `Task` per row. `prompt`, `gold` and `id` are each a column name, a format string
    with `{column}` fields (any string containing "{"), or a callable on the row; a string with
    braces but no field names the column it spells, its braces doubled ("the {{question}}": the
    column `the {question}`), as no format string could. `id` defaults
    to `row-<index>`; prompt and id become str; gold becomes str unless it is None (or not
    given). An empty or blank cell is how a CSV file spells a missing value: a gold that is empty
    or only whitespace is None, as a null one is (a scorer that compares with the gold refuses such
    a task), and such a prompt is refused, as a null one is. `meta` names columns copied as-is into
    `Task.meta` (a single string is one column).

    Raises UserError for no rows, rows that cannot be tasks (every one, grouped by what is wrong:
    a row that is not a mapping, a missing column, a prompt that is empty or None; naming the
    columns that exist) and duplicate ids (naming them)."""
    rows = list(rows)
    if not rows:
        raise UserError("no rows to make tasks from: the loader returned nothing "
                        "(check the dataset, split, path or limit)")
    columns = [meta] if isinstance(meta, str) else list(meta or [])
    tasks, unusable = [], _Unusable()
    for index, row in enumerate(rows):
        try:
            tasks.append(_task(row, index, prompt=prompt, gold=gold, id=id, meta=columns))
        except _RowProblem as problem:
            unusable.add(problem, index, row)
    unusable.raise_if_any(len(rows))
    check_ids(tasks)
    return tasks


def _task(row: Any, index: int, *, prompt: ColumnSpec, gold: ColumnSpec | None, id: ColumnSpec | None,
          meta: list[str]) -> Task:
    if not isinstance(row, Mapping):
        raise _RowProblem(f"is a {type(row).__name__}, not a mapping of columns")
    text = _field(prompt, row, "prompt")
    if text is None or not _text(text).strip():
        raise _RowProblem("the prompt is empty or null")
    answer = _field(gold, row, "gold") if gold is not None else None
    if answer is not None and not _text(answer).strip():  # a CSV's empty cell: no answer, as a null is
        answer = None
    key = _field(id, row, "id") if id is not None else f"row-{index}"
    if key is None:
        raise _RowProblem(f"the id is null; give each row an id, or {NUMBER_ROWS}")
    for role, value in (("prompt", text), ("gold", answer), ("id", key)):
        if isinstance(value, float) and not math.isfinite(value) and str(value) in ("nan", "inf", "-inf"):
            raise _RowProblem(f"the {role} is {value!r} (NaN or Infinity in JSON), which is no answer nor text; "
                              "write the value itself, as text")
    extra = {c: _column(row, c, "meta") for c in meta}
    task = Task(id=_text(key), prompt=_text(text), gold=None if answer is None else _text(answer), meta=extra)
    # rows from anywhere (a dataset's JSON, a program's own): a task is written again as UTF-8
    fields = {"prompt": task.prompt, "gold": task.gold or "", "id": task.id, "meta": extra}
    found = reading.surrogate_at(fields)
    if found is not None:
        raise _RowProblem(f"the {found[0].split('.')[0]} {reading.SURROGATE_FIX}")
    if (place := reading.nul_at(fields)) is not None:
        raise _RowProblem(_nul(place, {"prompt": prompt, "gold": gold, "id": id}))
    return task


def _nul(place: str, specs: Mapping[str, ColumnSpec | None]) -> str:
    """A NUL in a task: a CLI agent is given its prompt on a command line, which cannot hold one,
    and a judge is given its gold; said with the column it came from when a column name says it."""
    role, _, column = place.partition(".")
    spec = column.split(".")[0] or specs.get(role)
    named = f" (column {quoted(spec, 60)})" if isinstance(spec, str) and "{" not in spec else ""
    return (f"the {role}{named} holds a NUL character (\\u0000 in JSON), which no command line can pass to an agent; "
            "remove it from the file")


def _text(value: Any) -> str:
    """A cell as text, as a JSON file spells it where Python would not: _text(True) == "true"
    (a number read from a JSON file keeps its own spelling: `local.SourceFloat`)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class _RowProblem(Exception):
    """What makes one row no task, said without the row's number (rows with one problem are named together)."""


class _Unusable:
    """The rows that cannot be tasks, by problem: a file with a column missing from 300 rows is one
    line naming a few of them, and a file with three different slips is told all three at once."""

    SHOWN_PROBLEMS, SHOWN_ROWS, SHOWN_COLUMNS = 4, 5, 20

    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = {}
        self.columns: str | None = None

    def add(self, problem: _RowProblem, index: int, row: Any) -> None:
        self.rows.setdefault(str(problem), []).append(index + 1)
        if self.columns is None and isinstance(row, Mapping):
            names = [str(name) for name in itertools.islice(row, self.SHOWN_COLUMNS + 1)]
            more = f" and {len(row) - self.SHOWN_COLUMNS} more" if len(names) > self.SHOWN_COLUMNS else ""
            self.columns = f"row {index + 1}'s columns: {', '.join(names[:self.SHOWN_COLUMNS]) or 'none'}{more}"

    def raise_if_any(self, total: int) -> None:
        if not self.rows:
            return
        bad = sum(len(numbers) for numbers in self.rows.values())
        said = [f"{_rows(numbers, self.SHOWN_ROWS)}: {problem}"
                for problem, numbers in list(self.rows.items())[:self.SHOWN_PROBLEMS]]
        if len(self.rows) > self.SHOWN_PROBLEMS:
            said.append(f"and {len(self.rows) - self.SHOWN_PROBLEMS} other problems")
        which = ("the one row cannot be made a task" if total == 1 else f"{bad} of {total} rows cannot be made tasks"
                 if bad < total else f"none of the {total} rows can be made tasks")
        raise UserError(f"{which}: {'; '.join(said)} (counting rows from 1; blank lines "
                        f"are not rows){'; ' + self.columns if self.columns else ''}")


def _rows(numbers: list[int], shown: int, word: str = "row") -> str:
    """"row 4", "rows 4, 9 and 12", "rows 4, 9, 12, 20, 31 and 7 more"."""
    if len(numbers) == 1:
        return f"{word} {numbers[0]}"
    listed = ", ".join(map(str, numbers[:shown]))
    rest = len(numbers) - shown
    if rest > 0:
        return f"{word}s {listed} and {rest} more"
    head, _, last = listed.rpartition(", ")
    return f"{word}s {head} and {last}"


@dataclass(frozen=True, kw_only=True)
class Columns:
    """Which column holds each part of a task; None where no column does (or none could be told)."""

    prompt: str | None
    gold: str | None
    id: str | None
    warnings: tuple[str, ...] = ()  # what the rows hold that a spec of these columns should know of


def columns_of(rows: Sequence[Mapping]) -> list[str]:
    """The columns of the first rows, in the order they are met: a column the first row lacks is
    one still. columns_of([{"id": 1}, {"id": 2, "team": "x"}]) == ["id", "team"]"""
    found: dict[str, None] = {}
    for row in rows[:SAMPLED_ROWS]:
        if isinstance(row, Mapping):
            found.update(dict.fromkeys(str(column) for column in row))
    return list(found)


def guess_columns(rows: Sequence[Mapping]) -> Columns:
    """The columns of the first rows (`columns_of`) that look like the prompt, the gold answer and
    the id: by name first (a word of it: "Expected Team" is a gold), else the prompt is the column
    with the longest text and the gold the one with the shortest of those whose values repeat (a
    value on every row of its own is an id's, not an answer's). A column that repeats a value across
    the rows is no id, whatever its name (one so named is said in `warnings`). guess_columns([{"id": "r1",
    "request": "my invoice is wrong", "team": "billing"}]) == Columns(prompt="request", gold="team", id="id")"""
    names = columns_of(rows)
    named = _named(names, ID_NAMES)
    repeat = _first_repeat(_cells(rows, named)) if named else None
    key = None if repeat else named
    rest = [c for c in names if c != named]
    prompt = _named(rest, PROMPT_NAMES, unless=GOLD_NAMES) or _by_length(rows, rest, longest=True)
    rest = [c for c in rest if c != prompt]
    repeating = [c for c in rest if not _all_distinct(rows, c)]
    gold = _named(rest, GOLD_NAMES, unless=PROMPT_NAMES) or _by_length(rows, repeating or rest, longest=False)
    if key is None:
        key = next((c for c in rest if c != gold and _all_distinct(rows, c) and not _first_repeat(_cells(rows, c))),
                   None)
    warnings = () if repeat is None else (
        f"the column {quoted(named, 60)} reads as the id, but {quoted(repeat[0], 60)} is on {_rows(repeat[1], 5)} "
        f"(counting rows from 1), and ids must be unique: the spec {f'takes {key!r}' if key else 'numbers the rows'}"
        f" instead; give each row its own id, or name another id column",)
    return Columns(prompt=prompt, gold=gold, id=key, warnings=warnings)


def _cells(rows: Sequence[Mapping], column: str) -> list[Any]:
    """Each row's value of `column`, None where it has none."""
    return [row.get(column) if isinstance(row, Mapping) else None for row in rows]


def _first_repeat(values: Sequence[Any]) -> tuple[str, list[int]] | None:
    """The first value given again (as text; None is no value), and where, counting from 1:
    _first_repeat(["a", "b", None, None, "a"]) == ("a", [1, 5])"""
    seen: set[str] = set()
    for value in values:
        if value is None:
            continue
        if (text := _text(value)) in seen:
            return text, [index + 1 for index, other in enumerate(values) if other is not None and _text(other) == text]
        seen.add(text)
    return None


def _named(columns: Sequence[str], wanted: Sequence[str], unless: Sequence[str] = ()) -> str | None:
    """The first column named as one of `wanted` is, else whose name has such a word in it and
    none of `unless` ("Expected Text" is no prompt)."""
    lowered = {c.lower(): c for c in columns}
    found = next((lowered[name] for name in wanted if name in lowered), None)
    words = {c: set(re.findall(r"[a-z0-9]+", c.lower())) for c in columns}
    return found or next((c for name in wanted for c in columns if name in words[c] and not words[c] & set(unless)),
                         None)


def _all_distinct(rows: Sequence[Mapping], column: str) -> bool:
    """Whether the first rows hold a different value of `column` each (more than two of them)."""
    values = [str(row.get(column)) for row in rows[:SAMPLED_ROWS] if isinstance(row, Mapping)]
    return len(values) > 2 and len(set(values)) == len(values)


def _by_length(rows: Sequence[Mapping], columns: Sequence[str], *, longest: bool) -> str | None:
    """The column whose values are longest (or shortest) as text across the first rows."""
    if not columns:
        return None
    sample = [row for row in rows[:SAMPLED_ROWS] if isinstance(row, Mapping)]
    length = {c: sum(len(str(row.get(c, ""))) for row in sample) for c in columns}
    return (max if longest else min)(columns, key=lambda c: length[c])


def _field(spec: ColumnSpec, row: Mapping, role: str) -> Any:
    if callable(spec):
        try:
            return spec(row)
        except KeyError as exc:
            raise _missing(exc.args[0] if exc.args else "?", role) from None
    if not isinstance(spec, str):
        raise UserError(f"{role} must be a column name, a format string or a callable, "
                        f"not {type(spec).__name__}")
    if "{" not in spec:
        return _column(row, spec, role)
    parts = _parsed(spec, role)
    if all(name is None for _, name, _, _ in parts):  # no {column}: a column whose name has braces, as {{ }}
        return _column(row, "".join(literal for literal, *_ in parts), role)
    return "".join(_filled(spec, parts, row, role))


def _parsed(template: str, role: str) -> list[tuple[str, str | None, str | None, str | None]]:
    try:
        return list(string.Formatter().parse(template))
    except ValueError as exc:
        raise UserError(f"{role} format {template!r} is not usable ({exc}); name columns as "
                        "{column} and write literal braces as {{ }}") from None


def _filled(template: str, parts: list, row: Mapping, role: str) -> Iterable[str]:
    """The template's text with each {column} as the row holds it. Nothing else a format string
    can do is done: a width ({c:>400000000}) would make a row as long as it says, and an
    attribute ({c.__class__}) would read past the row."""
    for literal, name, spec, conversion in parts:
        yield literal
        if name is None:
            continue
        if spec or conversion or not name:
            raise UserError(f"{role} format {template!r}: {{{name}{'!' + conversion if conversion else ''}"
                            f"{':' + spec if spec else ''}}} is not a column; name columns as {{column}}, "
                            "with nothing after the name, and write literal braces as {{ }}")
        yield _text(_column(row, name, role))


def _column(row: Mapping, name: str, role: str) -> Any:
    if name not in row:
        raise _missing(name, role)
    return row[name]


def _missing(name: Any, role: str) -> _RowProblem:
    return _RowProblem(f"the {role} column {name!r} is missing")


def check_ids(tasks: list[Task], *, listed: bool = False) -> None:
    """Ids are one line of visible text: one is printed on a line of `show` and named in outcomes,
    where a line break in it would forge a line; and each task's own. The tasks are rows of a file
    or dataset, unless `listed` (a spec's inline tasks): then they are counted, and fixed, as tasks."""
    place, fix = ("task", "give each task its own id") if listed else ("row", f"choose another id column, or {NUMBER_ROWS}")
    counted = f"(counting {place}s from 1{'' if listed else '; blank lines are not rows'})"
    for index, task in enumerate(tasks):
        if not task.id.strip() or UNPRINTABLE.search(task.id):
            why = "is blank" if not task.id.strip() else "holds a line break or a control character"
            raise UserError(f"{place} {index + 1} {counted}: the task id {quoted(task.id, 60)} {why}; ids are one line "
                            f"of text ({fix})")
    repeat = _first_repeat([task.id for task in tasks])
    if repeat is not None:
        others = sum(n > 1 for n in Counter(task.id for task in tasks).values()) - 1
        more = "" if not others else f", and {others} more id{'s repeat' if others > 1 else ' repeats'}"
        raise UserError(f"the task id {quoted(repeat[0], 60)} is on {_rows(repeat[1], 5, place)} {counted}{more}; "
                        f"ids must be unique: {fix}")
