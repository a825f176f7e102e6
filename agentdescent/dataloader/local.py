"""Rows from local files: JSON Lines, JSON, CSV and TSV, each row a plain `dict`; `file_rows` reads a
tasks file by its suffix and names what to do with a folder or a Parquet or Arrow file instead.

A tasks file is read whole as bounded data (`agentdescent.reading`): a regular file of at most
`MAX_FILE_BYTES` (64 MB; pass `max_bytes=` for more), strict UTF-8, never a FIFO, a device or a
file under /proc, /sys or /dev. `limit` (None, or a count of rows, 0 or more) keeps the first rows;
the file is still read to its end. A key named twice in one JSON object is refused, as a CSV
header naming a column twice is: the row would keep only one of the two.
A JSON number with a fraction or an exponent is read as a `SourceFloat`: a float whose `str()` is
the number as the file spells it ("2.50", "1e3"), so that a gold answer made of it is the file's
own, not Python's spelling ("2.5", "1000.0").
Left out: streaming, shuffling and splitting (the engine holds out its own validation set), and
Parquet and Arrow (Hugging Face's `hf_rows` reads a dataset on the Hub as rows of JSON).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentdescent import reading
from agentdescent.errors import UserError
from agentdescent.quoting import quoted

__all__ = ["SourceFloat", "csv_rows", "file_rows", "json_rows", "jsonl_rows"]

ROW_KEYS = ("rows", "data", "records", "examples", "items")  # json_rows: where a wrapped list lives
CSV_DELIMITERS = ",;\t|"  # what a CSV file's header may be split by
_SNIFF_CHARS = 64 * 1024  # of a CSV file's start, read to tell its delimiter
MAX_FILE_BYTES = 64_000_000  # a tasks file past this is refused unless max_bytes says more


def jsonl_rows(path: str | os.PathLike, *, limit: int | None = None, max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """The JSON objects of a JSON Lines file, one per non-blank line, at most `limit`.
    Raises UserError for a file `reading` refuses (missing, not a regular file, over `max_bytes`,
    not UTF-8), or naming the file and line of a line that is not a JSON object."""
    _check_limit(limit)
    with _open(path, max_bytes) as handle:
        return _line_rows(path, handle, limit)


def _line_rows(path: str | os.PathLike, handle: io.StringIO, limit: int | None) -> list[dict]:
    rows: list[dict] = []
    for number, line in enumerate(handle, start=1):
        if limit is not None and len(rows) >= limit:
            break
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_float=SourceFloat, object_pairs_hook=_object)
        except _Repeated as exc:
            raise UserError(f"{path}: line {number}: {exc}") from None
        except ValueError as exc:
            raise UserError(f"{path}: line {number} {_not_json(line, exc)}") from None
        except RecursionError:
            raise UserError(f"{path}: line {number} is nested too deeply to read") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}: line {number} is a {type(row).__name__}, not an object")
        _refuse_surrogate(row, f"{path}: line {number}")
        rows.append(row)
    return rows


def _not_json(line: str, exc: ValueError) -> str:
    """What is wrong with a line of JSON Lines, said as a slip where it is one: an object followed by
    a comma (a JSON array's items pasted a line each) is valid JSON but for the comma."""
    if isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data" and line[exc.pos:].strip() == ",":
        return ("ends in a comma after its object, and JSON Lines has nothing between its objects, one a line: "
                "remove the comma at each line's end")
    return f"is not valid JSON ({exc})"


def json_rows(path: str | os.PathLike, *, limit: int | None = None, max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """The objects of a JSON file holding a list of objects, or an object with that list under
    one of the keys "rows", "data", "records", "examples", "items" (first found wins). Items in
    the datasets-server shape `{"row_idx", "row": {...}}` become their `row`. At most `limit`.
    A file holding one JSON object a line is JSON Lines under a .json name (what the `datasets`
    library's `Dataset.to_json` writes unless told otherwise), and is read as `jsonl_rows` reads it.
    Raises UserError for a file `reading` refuses, invalid JSON (with its line) or a non-object item;
    an error names the file's keys only when they look like names."""
    _check_limit(limit)
    with _open(path, max_bytes) as handle:
        try:
            data = json.load(handle, parse_float=SourceFloat, object_pairs_hook=_object)
        except _Repeated as exc:
            raise UserError(f"{path}: {exc}") from None
        except json.JSONDecodeError as exc:
            if _json_lines(exc):
                handle.seek(0)
                return _line_rows(path, handle, limit)
            raise UserError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
        except ValueError as exc:  # a number past the digits Python converts
            raise UserError(f"{path}: invalid JSON: {exc}") from None
        except RecursionError:
            raise UserError(f"{path}: the JSON is nested too deeply to read") from None
    if isinstance(data, dict):
        key = next((k for k in ROW_KEYS if isinstance(data.get(k), list)), None)
        if key is None:
            raise UserError(f"{path}: expected a list of objects, or an object with a list under "
                            f"one of {list(ROW_KEYS)}; found keys {_keys(data)}")
        data = data[key]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a list of objects, found a {type(data).__name__}")
    rows = [unwrap_row(item) for item in data[:limit]]
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{path}: item {index} is a {type(row).__name__}, not a JSON object")
        _refuse_surrogate(row, f"{path}: item {index}")
    return rows


def _json_lines(exc: json.JSONDecodeError) -> bool:
    """Whether a document that is not one JSON value is JSON Lines: more follows its first value,
    and its first line is an object of its own (a pretty-printed object's first line is not)."""
    if exc.msg != "Extra data":
        return False
    first = next((line for line in exc.doc.splitlines() if line.strip()), "")
    try:
        return isinstance(json.loads(first), dict)
    except (ValueError, RecursionError):
        return False


def csv_rows(path: str | os.PathLike, *, limit: int | None = None, delimiter: str | None = None,
             max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """The rows of a CSV file with a header line, as `{column: text}` (csv.DictReader, UTF-8, a
    byte-order mark ignored), at most `limit`. The `delimiter` is, unless given, the one of
    `CSV_DELIMITERS` that splits the header and the first lines alike (a spreadsheet in a European
    locale saves with ";"), a comma when none does. Raises UserError for a file `reading` refuses,
    a header naming a column twice, or naming the file and line of a row whose field count differs
    from the header or that cannot be parsed."""
    rows: list[dict] = []
    _check_limit(limit)
    with _open(path, max_bytes, newline="") as handle, _cells_up_to(max_bytes):
        if delimiter is None:
            delimiter = _delimiter(handle.read(_SNIFF_CHARS))
            handle.seek(0)
        reader = csv.DictReader(handle, delimiter=delimiter, strict=True)
        try:
            _refuse_repeated(path, reader.fieldnames or [])
            for row in reader:
                if limit is not None and len(rows) >= limit:
                    break
                if None in row or None in row.values():
                    raise UserError(f"{path}: line {reader.line_num} has a different number of "
                                    f"fields than the header ({len(reader.fieldnames or [])})")
                rows.append(row)
        except csv.Error as exc:  # the line being read: DictReader's own line_num is the last row's
            raise UserError(f"{path}: line {reader.reader.line_num} is not valid CSV ({exc})") from None
    return rows


def tsv_rows(path: str | os.PathLike, *, limit: int | None = None, max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """The rows of a tab-separated file with a header line (`csv_rows`, split at tabs)."""
    return csv_rows(path, limit=limit, delimiter="\t", max_bytes=max_bytes)


TASK_FILES = {".jsonl": jsonl_rows, ".csv": csv_rows, ".tsv": tsv_rows, ".json": json_rows}  # a tasks file's reader, by suffix
TASK_FILE_SUFFIXES = ", ".join(list(TASK_FILES)[:-1]) + f" or {list(TASK_FILES)[-1]}"  # as messages name them


def file_rows(path: str | os.PathLike, *, limit: int | None = None, max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """The rows of a tasks file, read as its suffix says (`TASK_FILES`). Raises UserError for any
    other path, naming the ways to read a folder or a Parquet or Arrow file (what Hugging Face
    tools save) when it is one."""
    suffix = Path(path).suffix.lower()
    loader = TASK_FILES.get(suffix)
    if loader is not None:
        return loader(path, limit=limit, max_bytes=max_bytes)
    ways = ("read the dataset from the Hugging Face Hub by its name (a spec: tasks: {hf: NAME, split: SPLIT}; Python: "
            'hf_rows(NAME, SPLIT)), or export its rows as JSON Lines (datasets: Dataset.to_json("tasks.jsonl"))')
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder, not a tasks file: name the {TASK_FILE_SUFFIXES} file in it, {ways}")
    if suffix in (".parquet", ".arrow"):
        raise UserError(f"{path} is {'a Parquet' if suffix == '.parquet' else 'an Arrow'} file, which is not read "
                        f"here: {ways}")
    raise UserError(f"tasks file {path} must end in {TASK_FILE_SUFFIXES}")


@contextlib.contextmanager
def _cells_up_to(size: int) -> Iterator[None]:
    """The csv module's cap on one cell (131,072 characters unless raised) at least `size` while
    a file is read: a cell is bounded by the file's own cap. The cap is the process's, so the one
    found is put back after."""
    before = csv.field_size_limit()
    csv.field_size_limit(max(before, size))
    try:
        yield
    finally:
        csv.field_size_limit(before)


class _Repeated(ValueError):
    """A JSON object naming one key twice, said without the file's name and line."""


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object as a dict, refusing a key named twice: the dict would keep only the last value
    (as a CSV header naming a column twice is refused)."""
    row = dict(pairs)
    if len(row) == len(pairs):
        return row
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Repeated(f"an object names the key {reading.name_or_count(key)} twice, and only its last value "
                            "would be kept: rename or remove one of the two")
        seen.add(key)
    return row


def _check_limit(limit: object) -> None:
    """`limit` is None (every row) or a count of rows, 0 or more: the same for each reader."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise UserError(f"limit must be a whole number of rows, 0 or more (or None for every row), not {limit!r:.40}")


class SourceFloat(float):
    """A JSON number as its file spells it: SourceFloat("2.50") == 2.5 and str(SourceFloat("2.50")) == "2.50"."""

    text: str

    def __new__(cls, text: str) -> SourceFloat:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple:  # a task's meta crosses processes: it comes back spelt as it was
        return SourceFloat, (self.text,)


def _delimiter(start: str) -> str:
    """The delimiter of `CSV_DELIMITERS` that splits the header and the lines after it alike (a
    column named "answer (short, one word)" in a ";" file has a comma of its own), else the one the
    header alone suggests; a comma when none splits it."""
    lines = [line for line in start.splitlines()[:20] if line.strip()]
    if len(lines) > 2:
        lines = lines[:-1]  # the last may be cut short by the sample's end
    agreed = [d for d in CSV_DELIMITERS if lines and lines[0].count(d) and
              len({len(row) for row in csv.reader(lines, delimiter=d)}) == 1]
    if len(agreed) == 1:
        return agreed[0]
    try:
        return csv.Sniffer().sniff(lines[0] if lines else "", delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:  # one column, or a header no delimiter splits
        return ","


def _refuse_repeated(path: str | os.PathLike, header: Sequence[str]) -> None:
    """A header naming one column twice: a row would keep only the last column of the name."""
    seen = set()
    for name in header:
        if name in seen:
            raise UserError(f"{path}: the header names the column {quoted(name, 60)} twice, and a row keeps only one "
                            "of them: rename one of the two")
        seen.add(name)


def _open(path: str | os.PathLike, max_bytes: int, newline: str | None = None) -> io.StringIO:
    """The file's text as a stream that reads as `open(path, encoding="utf-8-sig", newline=...)`
    would (a byte-order mark, which Windows tools write, dropped): newline=None turns every line
    ending into "\\n", newline="" keeps them."""
    text = reading.read_text(path, what="tasks file", limit=max_bytes, encoding="utf-8-sig")
    if newline is None:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return io.StringIO(text, newline="" if newline == "" else "\n")


def _refuse_surrogate(row: dict, place: str) -> None:
    """Refuse a row holding a lone surrogate (JSON's escape \\ud800 with no pair): a task is
    written again as UTF-8 (the run store's tasks.jsonl), which cannot hold one. Only a column
    whose name looks like a name is named: the rest of the row is the file's own text."""
    found = reading.surrogate_at(row)
    if found is None:
        return
    column, in_key = found
    where = ("a column name" if in_key else f"column {column!r}" if reading.looks_like_a_name(column)
             else "a value")
    raise UserError(f"{place}: {where} {reading.SURROGATE_FIX}")


def _keys(data: dict) -> str:
    """_keys({"things": [], "a b": 1}) == "['things'] and 1 more" """
    names = sorted(k for k in data if reading.looks_like_a_name(k))[:10]
    rest = len(data) - len(names)
    return f"{names}{f' and {rest} more' if rest else ''}"


def unwrap_row(item: Any) -> Any:
    """A datasets-server row item `{"row_idx", "row", "truncated_cells"}` → its `row` dict."""
    wrapped = isinstance(item, dict) and "row_idx" in item and isinstance(item.get("row"), dict)
    return item["row"] if wrapped else item
