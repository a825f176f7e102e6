"""A run spec's problems in words: `Problem` (a field and what to do about it), `SpecError` (every
problem of a spec at once) and `schema_problems`, the schema's errors as problems.

A problem never repeats the file it was read from: a field that is not a spec's is named only when
it looks like a field name, and then with the field it is close to (`n_worker`: did you mean
'n_workers'?); every message is redacted and cut to `MESSAGE_CHARS` in its middle, since its
end says what to do (a long path named twice must not cut off the path to give).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationInfo, field_validator

from agentdescent import reading
from agentdescent.agents.redact import redact
from agentdescent.errors import OutOfRange, UserError

NAMED_UNKNOWN = 8  # fields that are not a spec's, named one by one; the rest are counted
MESSAGE_CHARS, FIELD_CHARS = 1_000, 80  # a problem's message and field, cut here
LISTED_PROBLEMS = 30  # a SpecError's message lists this many, then counts the rest
_UNKNOWN = "is not a field of a run spec (check its spelling)"
_CLOSE = 0.75  # how alike a field's name and an unknown one must be for the message to suggest it
_PATH_PART = re.compile(r"[\w.\-/*?\[\]',]{1,60}")


class Problem(BaseModel):
    """One thing wrong with a spec: the field (dotted, as written in the spec) and what to do. Both
    are redacted (a key from the environment becomes a marker) and cut to a bounded length, since
    a message may quote what a file or a program said."""

    field: str
    message: str

    @field_validator("field", "message")
    @classmethod
    def _bounded(cls, value: str, info: ValidationInfo) -> str:
        cap = MESSAGE_CHARS if info.field_name == "message" else FIELD_CHARS
        value = redact(value)
        if len(value) <= cap:
            return value
        if info.field_name != "message":
            return value[: cap - 1] + "…"
        return value[: cap // 2] + "…" + value[len(value) - (cap - cap // 2 - 1):]


class SpecError(UserError):
    """A spec that cannot run; `problems` lists every one, by field."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p.field}: {p.message}" for p in problems[:LISTED_PROBLEMS])
        if len(problems) > LISTED_PROBLEMS:
            lines += f"\n  ... and {len(problems) - LISTED_PROBLEMS} more"
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"the run spec has {len(problems)} {noun}:\n{lines}")


def schema_problems(errors: list, root: type[BaseModel]) -> list[Problem]:
    """The schema's errors as problems. A field that is not a spec's is named only when its name looks
    like a field name, and only the first few; the rest are counted, never quoted (a file that is not
    a spec, such as a list of accounts or keys, would otherwise be repeated line by line)."""
    found: list[Problem] = []
    unnamed: dict[str, int] = {}
    named = 0
    for error in errors:
        if error["type"] not in ("extra_forbidden", "unexpected_keyword_argument"):
            found.append(_problem(error))
            continue
        name = error["loc"][-1] if error["loc"] else ""
        if reading.looks_like_a_name(name) and named < NAMED_UNKNOWN:
            close = difflib.get_close_matches(name, _field_names(root, error["loc"][:-1]), n=1, cutoff=_CLOSE)
            message = f"is not a field of a run spec; did you mean {close[0]!r}?" if close else _UNKNOWN
            found.append(Problem(field=_where(error["loc"]), message=message))
            named += 1
        else:
            parent = _where(error["loc"][:-1])
            unnamed[parent] = unnamed.get(parent, 0) + 1
    for parent, count in unnamed.items():
        entries = "1 entry that is not a field" if count == 1 else f"{count} entries that are not fields"
        found.append(Problem(field=parent, message=f"holds {entries} of a run spec (not quoted: only names shaped "
                                                   f"like a field's are, the first {NAMED_UNKNOWN}); check that this "
                                                   "file is a run spec and how its fields are spelled"))
    return found


def _field_names(root: type[BaseModel], loc: tuple) -> list[str]:
    """The fields of the object at `loc` in a spec of `root` (`()`: the spec's own, `("budget",)`:
    a budget's); none where the path leads to no object of fields."""
    shape: Any = root
    for part in (*loc, None):
        fields: dict[str, object]  # each field's annotation (a dataclass's may be a string)
        if isinstance(shape, type) and issubclass(shape, BaseModel):
            fields = {name: field.annotation for name, field in shape.model_fields.items()}
        elif dataclasses.is_dataclass(shape):
            fields = {field.name: field.type for field in dataclasses.fields(shape)}
        else:
            return []
        if part is None:
            return list(fields)
        shape = next((arg for arg in (typing.get_args(fields.get(part)) or (fields.get(part),))
                      if isinstance(arg, type)), None)
    return []


def _problem(error: dict) -> Problem:
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, OutOfRange):  # an object's own check of one of its fields: named at that field
        return Problem(field=_where((*error["loc"], cause.field)), message=f"{cause.allowed}; got {cause.value!r}")
    message = error["msg"].removeprefix("Value error, ").replace("Input should be", "must be", 1)
    if error["type"] == "missing":
        message = "is required"
    elif error["type"] in ("dataclass_type", "model_type", "model_attributes_type"):  # a number where fields go
        given = error["input"]
        what = ("true or false" if isinstance(given, bool) else "a number" if isinstance(given, (int, float)) else
                "a list" if isinstance(given, list) else f"a {type(given).__name__}")
        message = f"is {what}, where a mapping of its fields goes (docs/runs.md, \"A run spec\", lists them)"
    return Problem(field=_where(error["loc"]), message=message)


def _where(loc: tuple) -> str:
    """A dotted field path; a part that does not look like a field name or a glob is not repeated."""
    parts = [str(part) for part in loc if not str(part).startswith(("function-", "tagged-"))]
    return ".".join(part if _PATH_PART.fullmatch(part) else "<entry>" for part in parts) or "spec"
