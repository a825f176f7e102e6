"""An artifact's state: a flat `{key: text}` mapping, and the one way a change is written over it."""

from __future__ import annotations

from collections.abc import Mapping

State = dict[str, str]


def apply(state: Mapping[str, str], after: Mapping[str, str | None]) -> State:
    """The state with `after` written over it. apply({"a": "1"}, {"a": None, "b": "2"}) == {"b": "2"}"""
    new = dict(state)
    for key, text in after.items():
        if text is None:
            new.pop(key, None)
        else:
            new[key] = text
    return new
