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
    digest = hashlib.sha256()
    # surrogatepass: a proposal may carry a lone surrogate; it is refused at admission, not here
    if sum(len(key) + len(text) for key, text in state.items()) <= WHOLE_CHARS:
        digest.update(json.dumps(state, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    else:  # the same bytes a JSON token at a time: a large folder is not held twice more (its JSON, its UTF-8)
        for chunk in _ENCODER.iterencode(state):
            digest.update(chunk.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


WHOLE_CHARS = 1 << 20  # a state up to this size is hashed whole, which is faster than a token at a time
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False)
