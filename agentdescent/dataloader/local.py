"""Rows from local files: JSON Lines, JSON and CSV, each row a plain `dict`.

Left out: streaming, shuffling and splitting (the engine holds out its own validation set).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from agentdescent.dataloader.huggingface import unwrap_row
from agentdescent.errors import UserError

__all__ = ["csv_rows", "json_rows", "jsonl_rows"]

ROW_KEYS = ("rows", "data", "records", "examples", "items")  # json_rows: where a wrapped list lives


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
