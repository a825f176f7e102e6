"""How long a model client waits before its next attempt, and which refusals it waits out.

A server says when to come back in one of these headers, read in this order: `retry-after-ms`
(milliseconds), `Retry-After` (seconds or an HTTP date), and OpenAI's `x-ratelimit-reset-requests`
and `x-ratelimit-reset-tokens` (a Go duration: "6m0s", "1s", "20ms"): the reset of the limit whose
`x-ratelimit-remaining-*` is 0, else the later of the two (a token limit may refuse a request
before its count reaches 0). Whatever it says is capped at `RETRY_AFTER_CAP`. Where it says nothing,
the wait is the client's jittered exponential backoff (`backoff_wait`), and where it says less,
the backoff too: a server that answers "0" to every attempt is not asked as fast as a loop runs.

A 429 (rate limited) and a 529 (overloaded) are `WAITED_OUT`: the server asks for time, not a fix,
so the client tries again while its call's deadline leaves time for the wait; `max_retries` bounds
the other retried failures, and these attempts count toward none of it. `waited_out_hint` is what
helps when the limit outlasts the deadline.

    server_wait({"x-ratelimit-reset-requests": "12s"}) == 12.0

Left out: sending and timing the attempts (`http`), and the headers of other shapes (Anthropic's
`anthropic-ratelimit-*-reset` timestamps: its 429 and 529 carry `Retry-After` as well).
"""

from __future__ import annotations

import email.utils
import math
import random
import re
from collections.abc import Mapping
from datetime import datetime, timezone

RETRY_AFTER_CAP = 60.0  # seconds: the longest wait a server's header is obeyed for
WAITED_OUT = {429: "rate limited", 529: "overloaded"}  # status -> what the server says, in words
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def server_wait(headers: Mapping[str, str], *, cap: float = RETRY_AFTER_CAP, now: datetime | None = None) -> float | None:
    """The wait a reply's headers ask for, in [0, cap]; None when they name none that reads."""
    said = {name.lower(): value for name, value in headers.items()}
    try:
        millis = float(said.get("retry-after-ms", ""))
    except ValueError:
        millis = math.nan
    if not math.isnan(millis):
        return max(0.0, min(cap, millis / 1000))
    after = retry_after_seconds(said.get("retry-after"), cap=cap, now=now)
    if after is not None:
        return after
    resets = {limit: go_duration_seconds(said.get(f"x-ratelimit-reset-{limit}")) for limit in ("requests", "tokens")}
    known = {limit: seconds for limit, seconds in resets.items() if seconds is not None}
    spent = [seconds for limit, seconds in known.items() if said.get(f"x-ratelimit-remaining-{limit}", "").strip() == "0"]
    chosen = spent or list(known.values())
    return min(cap, max(chosen)) if chosen else None


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


def go_duration_seconds(value: str | None) -> float | None:
    """A Go duration (or a bare number of seconds) in seconds; None when it is neither.

    go_duration_seconds("6m0s") == 360.0;  go_duration_seconds("20ms") == 0.02
    """
    text = (value or "").strip()
    try:
        seconds = float(text)
    except ValueError:
        if not text or _GO_PART.sub("", text):
            return None
        seconds = sum(float(number) * _GO_UNITS[unit] for number, unit in _GO_PART.findall(text))
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def backoff_wait(attempt: int, backoff: tuple[float, float], jitter: random.Random) -> float:
    """The wait after failed attempt `attempt` (1 for the first) when the server names none: about
    `base * 2**(attempt - 1)`, at most `cap`, the upper half of it drawn at random."""
    base, cap = backoff
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 64))
    return ceiling / 2 + jitter.uniform(0, ceiling / 2)


def refusal(status: int) -> str:
    """A retried status in words: refusal(429) == "rate limited (HTTP 429)";  refusal(503) == "HTTP 503"."""
    return f"{WAITED_OUT[status]} (HTTP {status})" if status in WAITED_OUT else f"HTTP {status}"


def waited_out_hint(max_concurrency: int, spec_field: str | None = None) -> str:
    """What helps a call a rate limit or an overload outlasted, besides the longer timeout its
    message names first (`spec_field`: the run spec's field that made the client, as `raise_hint`)."""
    if max_concurrency <= 1:
        return ", or ask the provider for a higher limit (this client sends one call at a time: max_concurrency=1)"
    fewer = max_concurrency // 2
    where = f"; in the run spec: the {spec_field}'s options: {{max_concurrency: {fewer}}}" if spec_field else ""
    return f", or send fewer calls at once with max_concurrency={fewer} (now {max_concurrency}{where})"
