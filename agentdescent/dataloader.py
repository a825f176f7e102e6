"""Rows in, tasks out: load rows from Hugging Face or local files and turn them into `Task`s.

`hf_rows` (from `agentdescent.huggingface`) reads a Hugging Face dataset through the
datasets-server HTTP API, paginated and cached. `jsonl_rows`, `json_rows` and
`csv_rows` read local files. `tasks_from` maps rows to tasks by column name, format string or
callable. Every loader returns plain `dict` rows, so they compose with any of them.

Left out on purpose: the `datasets` library and Parquet/Arrow downloads (the rows API needs only
`httpx`), streaming, shuffling and train/test splitting (the engine samples tasks and holds out
its own validation set), and image/audio cells (they arrive as whatever JSON the server sends).
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentdescent.errors import UserError
from agentdescent.huggingface import hf_rows, unwrap_row
from agentdescent.types import Task

__all__ = ["csv_rows", "hf_rows", "json_rows", "jsonl_rows", "tasks_from"]

ROW_KEYS = ("rows", "data", "records", "examples", "items")  # json_rows: where a wrapped list lives

ColumnSpec = str | Callable[[Mapping], Any]  # a column name, a "{column}" format, or a callable


# ---------------------------------------------------------------- local files


def jsonl_rows(path: str | os.PathLike, *, limit: int | None = None) -> list[dict]:
    """The JSON objects of a JSON Lines file, one per non-blank line, at most `limit`.
    Raises UserError for a missing file, or naming the file and line of a line that is not a
    JSON object."""
    rows: list[dict] = []
    with _open(path) as handle:
        for number, line in enumerate(handle, start=1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise UserError(f"{path}: line {number} is not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}: line {number} is a {type(row).__name__}, not an object")
            rows.append(row)
    return rows


def json_rows(path: str | os.PathLike, *, limit: int | None = None) -> list[dict]:
    """The objects of a JSON file holding a list of objects, or an object with that list under
    one of the keys "rows", "data", "records", "examples", "items" (first found wins). Items in
    the datasets-server shape `{"row_idx", "row": {...}}` become their `row`. At most `limit`.
    Raises UserError for a missing file, invalid JSON (with its line) or a non-object item."""
    with _open(path) as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if isinstance(data, dict):
        key = next((k for k in ROW_KEYS if isinstance(data.get(k), list)), None)
        if key is None:
            raise UserError(f"{path}: expected a list of objects, or an object with a list under "
                            f"one of {list(ROW_KEYS)}; found keys {sorted(data)[:10]}")
        data = data[key]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a list of objects, found a {type(data).__name__}")
    rows = [unwrap_row(item) for item in data[:limit]]
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{path}: item {index} is a {type(row).__name__}, not a JSON object")
    return rows


def csv_rows(path: str | os.PathLike, *, limit: int | None = None,
             delimiter: str = ",") -> list[dict]:
    """The rows of a CSV file with a header line, as `{column: text}` (csv.DictReader, UTF-8, a
    byte-order mark ignored), at most `limit`. Raises UserError for a missing file, or naming the
    file and line of a row whose field count differs from the header or that cannot be parsed."""
    rows: list[dict] = []
    with _open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle, delimiter=delimiter, strict=True)
        try:
            for row in reader:
                if limit is not None and len(rows) >= limit:
                    break
                if None in row or None in row.values():
                    raise UserError(f"{path}: line {reader.line_num} has a different number of "
                                    f"fields than the header ({len(reader.fieldnames or [])})")
                rows.append(row)
        except csv.Error as exc:
            raise UserError(f"{path}: line {reader.line_num} is not valid CSV ({exc})") from None
    return rows


def _open(path: str | os.PathLike, encoding: str = "utf-8", newline: str | None = None):
    if not Path(path).is_file():
        raise UserError(f"no such file: {path} (resolved: {Path(path).resolve()})")
    return open(path, encoding=encoding, newline=newline)


# ---------------------------------------------------------------- rows → tasks


def tasks_from(rows: Iterable[Mapping], *, prompt: ColumnSpec, gold: ColumnSpec | None = None,
               id: ColumnSpec | None = None, meta: Sequence[str] | None = None) -> list[Task]:
    """One `Task` per row. `prompt`, `gold` and `id` are each a column name, a format string
    with `{column}` fields (any string containing "{"), or a callable on the row. `id` defaults
    to `row-<index>`; prompt and id become str; gold becomes str unless it is None (or not
    given). `meta` names columns copied as-is into `Task.meta` (a single string is one column).

    Raises UserError for no rows, a non-mapping row, a missing column (naming it, the row index
    and the columns that exist) and duplicate ids (naming them)."""
    rows = list(rows)
    if not rows:
        raise UserError("no rows to make tasks from: the loader returned nothing "
                        "(check the dataset, split, path or limit)")
    columns = [meta] if isinstance(meta, str) else list(meta or [])
    tasks = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise UserError(f"row {index} is a {type(row).__name__}, not a mapping of columns")
        text = _field(prompt, row, index, "prompt")
        if text is None:
            raise UserError(f"row {index}: the prompt is None; columns: {list(row)}")
        answer = _field(gold, row, index, "gold") if gold is not None else None
        key = _field(id, row, index, "id") if id is not None else f"row-{index}"
        extra = {c: _column(row, c, index, "meta") for c in columns}
        tasks.append(Task(id=str(key), prompt=str(text),
                          gold=None if answer is None else str(answer), meta=extra))
    _check_unique(tasks)
    return tasks


def _field(spec: ColumnSpec, row: Mapping, index: int, role: str) -> Any:
    if callable(spec):
        try:
            return spec(row)
        except KeyError as exc:
            raise _missing(exc.args[0] if exc.args else "?", row, index, role) from None
    if not isinstance(spec, str):
        raise UserError(f"{role} must be a column name, a format string or a callable, "
                        f"not {type(spec).__name__}")
    if "{" not in spec:
        return _column(row, spec, index, role)
    try:
        return spec.format_map(row)
    except KeyError as exc:
        raise _missing(exc.args[0], row, index, role) from None
    except (IndexError, ValueError, AttributeError) as exc:
        raise UserError(f"{role} format {spec!r} is not usable ({exc}); name columns as "
                        "{column} and write literal braces as {{ }}") from None


def _column(row: Mapping, name: str, index: int, role: str) -> Any:
    if name not in row:
        raise _missing(name, row, index, role)
    return row[name]


def _missing(name: Any, row: Mapping, index: int, role: str) -> UserError:
    return UserError(f"{role}: column {name!r} is missing from row {index}; "
                     f"columns: {', '.join(map(str, row))}")


def _check_unique(tasks: list[Task]) -> None:
    counts = Counter(task.id for task in tasks)
    repeated = {key: n for key, n in counts.items() if n > 1}
    if repeated:
        shown = ", ".join(f"{key!r} (x{n})" for key, n in list(repeated.items())[:10])
        raise UserError(f"duplicate task ids: {shown}{' ...' if len(repeated) > 10 else ''}; "
                        "choose an id column or callable that is unique per row")
