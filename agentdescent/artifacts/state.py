"""An artifact's state: a flat `{key: text}` mapping, the one way a change is written over it, and its name."""

from __future__ import annotations

import hashlib
import json
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


def state_hash(state: Mapping[str, str]) -> str:
    """A name for a state that is the same in every process and for any key order; the evaluation
    cache keys rollouts by it. state_hash({"a": "x", "b": ""}) == state_hash({"b": "", "a": "x"})"""
    # surrogatepass: a proposal may carry a lone surrogate; it is refused at admission, not here
    blob = json.dumps(state, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:16]
