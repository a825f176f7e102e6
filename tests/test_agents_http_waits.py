"""How long the HTTP clients wait before trying again, and how long they keep trying: the server's
wait headers read, a rate limit (429) or an overload (529) waited out while the call's deadline
lasts, the other failures bounded by `max_retries`. The waits are recorded on a clock of the
test's own, never slept: nothing here asserts wall time."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from types import SimpleNamespace

import pytest

from agentdescent.agents import http
from agentdescent.agents.anthropic import claude
from agentdescent.agents.openai_compat import openai_compatible
from agentdescent.agents.waits import go_duration_seconds, server_wait
from agentdescent.errors import AgentError
from tests.loopback import LoopbackServer, Response, anthropic_messages, openai_chat

KEY = "sk-test-4f1c0ffee0123456789"
FAST = {"backoff": (0.001, 0.005)}
LIMITED = {"error": {"message": "Rate limit reached for gpt-test on requests per min (RPM)", "code": "rate_limit_exceeded"}}

pytestmark = pytest.mark.usefixtures("no_provider_env")


@pytest.fixture
def waits(monkeypatch):
    """The waits the client asks for, in order: recorded, and skipped on the clock its deadline reads."""
    asked: list[float] = []
    skipped = [0.0]

    def sleep(seconds: float) -> None:
        asked.append(seconds)
        skipped[0] += seconds

    monkeypatch.setattr(http, "time", SimpleNamespace(sleep=sleep, monotonic=lambda: time.monotonic() + skipped[0]))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return asked


def then_ok(refusal: Response, times: int):
    """A reply_fn refusing `times` requests with `refusal`, then answering "ok"."""
    left = [times]

    def reply(prompt):
        left[0] -= 1
        return refusal if left[0] >= 0 else "ok"

    return reply


def test_go_durations_read_as_seconds():
    assert go_duration_seconds("12s") == 12.0 and go_duration_seconds("1s") == 1.0
    assert go_duration_seconds("6m0s") == 360.0 and go_duration_seconds("1h2m3.5s") == 3723.5
    assert go_duration_seconds("20ms") == pytest.approx(0.02) and go_duration_seconds("1.5s") == 1.5
    assert go_duration_seconds("2") == 2.0  # a bare number: seconds
    for unreadable in (None, "", "soon", "1x", "s", "-1s", "1s2"):
        assert go_duration_seconds(unreadable) is None


def test_the_server_wait_is_read_from_any_of_its_headers_and_capped():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    assert server_wait({}) is None and server_wait({"retry-after": "soon"}) is None
    assert server_wait({"Retry-After": "2"}) == 2.0
    assert server_wait({"retry-after": format_datetime(now + timedelta(seconds=5), usegmt=True)}, now=now) == 5.0
    assert server_wait({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5  # the finer one first
    assert server_wait({"x-ratelimit-reset-requests": "12s"}) == 12.0
    assert server_wait({"x-ratelimit-reset-tokens": "20ms"}) == pytest.approx(0.02)
    assert server_wait({"x-ratelimit-reset-requests": "6m0s"}) == 60.0 and server_wait({"retry-after": "3600"}) == 60.0
    # the reset of the limit that is spent, else the later of the two
    both = {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "30s"}
    assert server_wait({**both, "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "900"}) == 1.0
    assert server_wait({**both, "x-ratelimit-remaining-requests": "5", "x-ratelimit-remaining-tokens": "0"}) == 30.0
    assert server_wait(both) == 30.0


def test_a_429_with_only_the_reset_headers_waits_what_they_say_past_max_retries(waits):
    limited = Response(status=429, headers={"x-ratelimit-reset-requests": "12s", "x-ratelimit-reset-tokens": "12s",
                                            "x-ratelimit-remaining-requests": "0"}, body=LIMITED)
    with LoopbackServer(openai_chat(then_ok(limited, 6))) as server:
        model = openai_compatible("gpt-test", base_url=server.url + "/v1", max_retries=2, **FAST)
        assert model("hi") == "ok"
    assert len(server.requests) == 7 and waits == [12.0] * 6
    assert (model.usage.calls, model.usage.failures) == (1, 0)


def test_a_rate_limit_that_outlasts_the_deadline_fails_saying_so_and_what_helps(waits):
    limited = Response(status=429, headers={"retry-after-ms": "12000"}, body=LIMITED)
    with LoopbackServer(openai_chat(lambda prompt: limited)) as server:
        model = openai_compatible("gpt-test", base_url=server.url + "/v1", timeout=100, max_retries=1, **FAST)
        with pytest.raises(AgentError) as raised:
            model("hi")
    assert len(server.requests) == 9 and waits == [12.0] * 8  # the ninth's wait would end past the deadline
    message = str(raised.value)
    assert "9 attempts: rate limited (HTTP 429)" in message and "Rate limit reached" in message
    assert "raise it with timeout=" in message and "send fewer calls at once with max_concurrency=4 (now 8" in message
    assert (model.usage.calls, model.usage.failures) == (1, 1)


def test_an_overloaded_claude_is_waited_out_past_max_retries(waits):
    overloaded = Response(status=529, body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    with LoopbackServer(anthropic_messages(then_ok(overloaded, 3))) as server:
        assert claude("claude-test", base_url=server.url, max_retries=0, **FAST)("hi") == "ok"
    assert len(server.requests) == 4 and len(waits) == 3


def test_a_server_that_says_wait_0_forever_is_not_asked_faster_than_the_backoff(waits):
    limited = Response(status=429, headers={"retry-after": "0"}, body=LIMITED)
    with LoopbackServer(openai_chat(lambda prompt: limited)) as server:
        model = openai_compatible("gpt-test", base_url=server.url + "/v1", timeout=60, backoff=(1.0, 8.0))
        with pytest.raises(AgentError, match="rate limited"):
            model("hi")
    assert all(low <= wait <= high for wait, (low, high) in zip(waits, [(0.5, 1), (1, 2), (2, 4), (4, 8)]))
    assert all(4 <= wait <= 8 for wait in waits[4:]) and len(server.requests) == len(waits) + 1 <= 15


def test_other_retried_failures_stay_bounded_by_max_retries(waits):
    down = Response(status=503, headers={"retry-after": "2"}, body="upstream unavailable")
    with LoopbackServer(openai_chat(lambda prompt: down)) as server:
        model = openai_compatible("gpt-test", base_url=server.url + "/v1", max_retries=2, **FAST)
        with pytest.raises(AgentError, match="3 attempts: HTTP 503"):
            model("hi")
    assert len(server.requests) == 3 and waits == [2.0, 2.0]


def test_a_rate_limit_uses_none_of_the_retries_another_failure_gets(waits):
    limited = Response(status=429, headers={"retry-after": "1"}, body=LIMITED)
    down = Response(status=503, body="upstream unavailable")
    replies = [limited] * 3 + [down] * 2 + ["ok"]
    with LoopbackServer(openai_chat(lambda prompt: replies.pop(0))) as server:
        assert openai_compatible("gpt-test", base_url=server.url + "/v1", max_retries=2, **FAST)("hi") == "ok"
    assert len(server.requests) == 6 and waits[:3] == [1.0] * 3
