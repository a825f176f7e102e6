"""What bounds a model client's call: its options checked (a timeout, a reply cap, retries,
concurrency, a backoff), how to raise a limit that was reached, and which answers are retried
after how long (a server's `Retry-After`, read and capped).

Left out: sending the call and keeping to these (`http`).
"""

from __future__ import annotations

import email.utils
import math
from datetime import datetime, timezone
from typing import Any

from agentdescent.errors import UserError

DEFAULT_TIMEOUT = 300.0  # seconds for a whole model call, its retries included
DEFAULT_MAX_REPLY_CHARS = 1_000_000
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
RETRY_AFTER_CAP = 60.0


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
                                 for v in pair):
        raise UserError(f"backoff must be two numbers of seconds >= 0, the first retry's wait and the longest, such "
                        f"as [0.5, 20]; got {value!r}")
    return float(pair[0]), float(pair[1])


def check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"timeout must be a positive number of seconds for the whole call, such as 300; got {value!r}")
    return float(value)


def retry_after_seconds(value: str | None, *, cap: float = RETRY_AFTER_CAP,
                        now: datetime | None = None) -> float | None:
    """The wait a `Retry-After` header asks for, in [0, cap]; None when absent or unreadable.

    retry_after_seconds("2") == 2.0;  retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 (past)
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a year past what a date holds
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if math.isnan(seconds):
        return None
    return max(0.0, min(cap, seconds))
