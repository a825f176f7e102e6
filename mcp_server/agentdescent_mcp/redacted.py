"""A `Service` whose answers are redacted (`agents.redact`) before they reach the host: a key in
the environment never appears in a tool result, whatever a run, a model or a file put there.
Left out: the tools themselves (`server`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from agentdescent.agents.redact import redact
from agentdescent.runs.service import Service


class Redacted:
    """`Service`, each answer redacted."""

    def __init__(self, service: Service) -> None:
        self._service = service

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._service, name)
        if not callable(found):
            return found
        return lambda *args, **kwargs: _redacted(found(*args, **kwargs))


def _redacted(answer: Any) -> Any:
    if isinstance(answer, list):
        return [_redacted(item) for item in answer]
    if isinstance(answer, BaseModel):
        masked = json.loads(redact(answer.model_dump_json()))
        try:
            return type(answer).model_validate(masked)
        except ValidationError as exc:  # a word of our own a variable happens to hold ("finished"): no key
            kept = answer.model_dump(mode="json")
            for error in exc.errors():
                _put(masked, kept, error["loc"])
            return type(answer).model_validate(masked)
    return answer


def _put(masked: Any, kept: Any, loc: tuple[int | str, ...]) -> None:
    """Give `masked` the value `kept` holds at `loc` (the deepest place both hold)."""
    for step in loc[:-1]:
        try:
            masked, kept = masked[step], kept[step]
        except (KeyError, IndexError, TypeError):
            return
    try:
        masked[loc[-1]] = kept[loc[-1]]
    except (KeyError, IndexError, TypeError):
        return
