"""What bounds a model client's call: its options checked (a timeout, a reply cap, retries,
concurrency, a backoff), how to raise a limit that was reached, which answers are retried, and
what a call that failed for good says of its cause (`cause`: read back from the words `http` fails
in, for the run's stop rules).

Left out: sending the call and keeping to these (`http`), and how long to wait before a retry
(`waits`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from agentdescent.agents.waits import WAITED_OUT
from agentdescent.errors import UserError

DEFAULT_TIMEOUT = 300.0  # seconds for a whole model call, its retries included
DEFAULT_MAX_REPLY_CHARS = 1_000_000
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
SENT_STATUSES = frozenset({400, 413, 422})  # a request refused for what it holds (a prompt too long): another may pass
# How `HTTPModel` words the answer it gave up on: "HTTP 401 (not retried): «...»", "HTTP 503: «...»" once its
# retries are spent, "rate limited (HTTP 429): «...»" once its deadline is (`waits.refusal`)
_GAVE_UP = re.compile(r"\bHTTP (\d{3})\)?( \(not retried\))?: ")
_TOO_LONG = re.compile(r"(?i)context.length|context.window|too long|too many tokens|maximum context|token limit|exceeds the max")


def raise_hint(option: str, example: str, spec_field: str | None = None) -> str:
    """How to raise a client's limit: in the options of the run spec's field that made it
    (`spec_field`: "agent", "reflector"), else where the client is made.

    raise_hint("timeout", "600", "reflector") == "raise it with timeout=600 (in the run spec: the reflector's options: {timeout: 600})"
    raise_hint("timeout", "600") == "raise it with timeout=600 where the client is made"
    """
    if spec_field is None:
        return f"raise it with {option}={example} where the client is made"
    return f"raise it with {option}={example} (in the run spec: the {spec_field}'s options: {{{option}: {example}}})"


def check_max_reply_chars(value: Any) -> int:
    """`value` if it is a whole number of characters above 0; otherwise a `UserError` with the fix."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"max_reply_chars must be a whole number of characters above 0, such as 200000; got {value!r}")
    return value


def check_counts(max_retries: Any, max_concurrency: Any) -> None:
    for name, value, least in (("max_retries", max_retries, 0), ("max_concurrency", max_concurrency, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserError(f"{name} must be a whole number >= {least}, such as {least + 3}; got {value!r}")


def check_backoff(value: Any) -> tuple[float, float]:
    """`value` as (base, cap) seconds when it is two finite numbers >= 0; otherwise a `UserError`."""
    pair = tuple(value) if isinstance(value, (list, tuple)) else ()
    if len(pair) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                                 for v in pair) or pair[0] > pair[1]:
        raise UserError(f"backoff must be two numbers of seconds >= 0, the first retry's wait and the longest (no "
                        f"shorter than the first), such as [0.5, 20]; got {value!r}")
    return float(pair[0]), float(pair[1])


def check_sampling(temperature: Any, max_tokens: Any, *, tokens_required: bool = False) -> None:
    """`UserError` unless `temperature` is None or a finite number >= 0 and `max_tokens` a whole
    number above 0 (or None, unless `tokens_required`: Anthropic's API asks for it): a provider
    refuses anything else with a 400 on every call, or, given text, may take its own default, silently."""
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not math.isfinite(temperature) or temperature < 0):
        raise UserError(f"temperature must be a number >= 0, such as 0.7 (or left out for the model's own); got {temperature!r}")
    if (max_tokens is not None or tokens_required) and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                                        or max_tokens < 1):
        raise UserError(f"max_tokens must be a whole number of tokens above 0, such as 4096; got {max_tokens!r}")


def check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"timeout must be a positive number of seconds for the whole call, such as 300; got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Cause:
    """Why a call failed for good, as its error says: the HTTP status the server answered last,
    whether the same call fails alike again (`lasting`: the answer was not retried), and what to do."""

    status: int
    lasting: bool
    fix: str  # the cause and how to fix it, in words

    @property
    def sent(self) -> bool:
        """Whether the server refused what the request held (a prompt too long): another request may pass."""
        return self.status in SENT_STATUSES


def cause(message: str | None) -> Cause | None:
    """The cause an error names where an HTTP client of ours wrote it (an `AgentError`'s text, or a
    rollout's error or an outcome's reason that quotes one); None for any other failure.

    cause("gpt-x: POST https://h/v1 failed after 1 attempt: HTTP 401 (not retried): «bad key»").lasting == True
    """
    found = _GAVE_UP.search(message or "")
    if found is None:
        return None
    status, lasting = int(found.group(1)), found.group(2) is not None
    return Cause(status=status, lasting=lasting, fix=_fix(status, lasting, (message or "")[found.end():]))


def _fix(status: int, lasting: bool, answer: str) -> str:
    if status in (401, 403):
        return f"the key is refused (HTTP {status}): fix the key, or its access to the model (the error names its variable)"
    if status == 404:
        return "the model or the URL is not found (HTTP 404): check the model's name and the base URL"
    if status == 413 or (status in SENT_STATUSES and _TOO_LONG.search(answer)):
        return f"the prompt is too long for the model (HTTP {status}): shrink the artifact, or use a model with a longer context"
    if status in WAITED_OUT:  # waited out while the call's deadline lasted
        return (f"the provider kept the calls {WAITED_OUT[status]} (HTTP {status}) past their deadline: lower max_concurrency, or "
                "give the calls a longer timeout to wait it out")
    if status >= 500 and not lasting:
        return f"the server kept failing (HTTP {status}) through the client's retries: wait until it is back, or raise " \
               "the client's max_retries/backoff"
    return f"the server refused the request (HTTP {status}): its answer, in the error, says why"
