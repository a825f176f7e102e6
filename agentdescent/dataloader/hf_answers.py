"""The datasets-server answers `hf_rows` uses: their shape checked, and kept in its on-disk cache.

`problem(route, params, answer)` says what in a `/splits` or `/rows` answer is not as the API
sends it (a `rows` that is no list, a count that is a string, a split without its config, a row
index outside the page asked for), or None: an answer is checked before it is cached or used, so
a malformed one neither crashes the caller nor stays on disk. A cache file holds the answer with
its keys replaced (`agents.redact`: a mirror may echo the request's headers) and the number of
bytes the server sent for it, which is what a cached read counts against the byte cap, however
the file spells the text. Cache files are read as `reading.read_bytes` reads any file: never
through a symlink, never waiting on a FIFO; any file that cannot be used is fetched again.

    problem("rows", {"offset": 0, "length": 100}, {"rows": 5}) == "'rows' is an integer, not a list"

Left out: expiry (a cached page is kept until its file is removed) and locking (two writers of one
file: the last one wins, whole).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from agentdescent import atomic
from agentdescent.agents.redact import redact
from agentdescent.errors import UserError
from agentdescent.reading import read_bytes

# A lone surrogate (the server's `\ud800` with no pair) written as itself would make the file no UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def problem(route: str, params: dict, answer: dict) -> str | None:
    """What in `answer` (to a `/splits` or `/rows` request with `params`) is not as the datasets-server
    API sends it, or None."""
    return _splits_problem(answer) if route == "splits" else _rows_problem(answer, params)


def _splits_problem(answer: dict) -> str | None:
    entries = answer.get("splits")
    if not isinstance(entries, list):
        return f"'splits' is {_kind(entries)}, not a list"
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"splits[{n}] is {_kind(entry)}, not an object"
        for field in ("config", "split"):
            if not isinstance(entry.get(field), str):
                return f"splits[{n}] has {_kind(entry.get(field))} for '{field}', not a string"
    return None


def _rows_problem(answer: dict, params: dict) -> str | None:
    items = answer.get("rows")
    if not isinstance(items, list):
        return f"'rows' is {_kind(items)}, not a list"
    total = answer.get("num_rows_total")
    if total is not None and not _count(total):
        return f"'num_rows_total' is {_kind(total)}, not a count"
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            return f"rows[{n}] is {_kind(item)}, not an object"
        if "row_idx" in item and not (_count(item["row_idx"]) and isinstance(item.get("row"), dict)):
            return f"rows[{n}] has {_kind(item['row_idx'])} for 'row_idx' and {_kind(item.get('row'))} for 'row'"
        cut = item.get("truncated_cells", [])
        if not (isinstance(cut, list) and all(isinstance(c, str) for c in cut)):
            return f"rows[{n}] has {_kind(cut)} for 'truncated_cells', not a list of column names"
    return _outside(items, int(params["offset"]), int(params["length"]))


def _outside(items: list[dict], offset: int, length: int) -> str | None:
    """Which row index lies outside the page asked for: a server that sends the same rows again and
    again (row_idx 0 on every page) would otherwise be paged through without end."""
    stray = next((item["row_idx"] for item in items if "row_idx" in item
                  and not offset <= item["row_idx"] < offset + length), None)
    return None if stray is None else f"row_idx {stray:,} is outside the page of rows {offset:,} to {offset + length - 1:,}"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _kind(value: Any) -> str:
    """What `value` is, by its JSON type alone: the server's text never reaches the message."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), f"a {type(value).__name__}")


def read_cached(path: Path, route: str, params: dict, limit: int) -> tuple[dict, int] | None:
    """The answer cached at `path` and the bytes the server sent for it; None when there is none to
    use (missing, not a regular file, a symlink, past `limit` bytes, corrupt, or malformed)."""
    try:
        data = read_bytes(path, what="hf_rows cache file", limit=limit, follow_symlinks=False)
        entry = json.loads(data)
    except (UserError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("answer"), dict) or not _count(entry.get("sent")):
        return None
    return (entry["answer"], entry["sent"]) if problem(route, params, entry["answer"]) is None else None


def redacted(answer: dict, env: dict[str, str]) -> tuple[dict, str]:
    """`answer` with every key in it replaced (`redact`, `env` adding the endpoint's own secrets),
    and its JSON text as cached: characters as themselves, not as escapes, so that the file is no
    larger than what the server sent."""
    text = _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}",
                          json.dumps(answer, ensure_ascii=False, separators=(",", ":")))
    clean = redact(text, env)
    return (answer if clean == text else json.loads(clean)), clean


def write_cached(path: Path, text: str, sent: int) -> None:
    """Keep the answer's JSON `text` at `path` with the byte count the server `sent` for it."""
    try:
        atomic.write_text(path, f'{{"sent":{sent},"answer":{text}}}')
    except OSError as exc:  # a cache that cannot be written must not lose the rows
        warnings.warn(f"hf_rows: could not write cache file {path}: {exc}", stacklevel=4)
