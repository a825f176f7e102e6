"""The HTTP completion clients against real servers on 127.0.0.1: request shapes, keys, retries,
failures, the deadline, the reply cap, usage and concurrency. Backoff is shrunk to milliseconds
so the file runs in seconds."""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import pickle
import threading
import time
import tracemalloc
import zlib
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from agentdescent.agents.anthropic import claude
from agentdescent.agents.base import ModelUsage, estimate_tokens, metering
from agentdescent.agents.endpoint import join_url
from agentdescent.agents.openai_compat import deepseek, openai_compatible
from agentdescent.agents.redact import redact
from agentdescent.agents.waits import retry_after_seconds
from agentdescent.errors import AgentError, UserError
from agentdescent.runs.spec import AgentSpec
from agentdescent.runs.wiring import make_client
from tests.doubles import InFlight
from tests.loopback import LoopbackServer, Response, anthropic_messages, closed_port_url, openai_chat

KEY = "sk-test-4f1c0ffee0123456789"
FAST = {"backoff": (0.001, 0.005)}


pytestmark = pytest.mark.usefixtures("no_provider_env")


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def steps(*replies):
    """A reply_fn answering with each reply in turn, then the last one forever."""
    queue, lock = list(replies), threading.Lock()

    def reply(prompt):
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return reply


def gpt(server, **options):
    return openai_compatible("gpt-test", base_url=server.url + "/v1", **{**FAST, **options})


# Request shapes and keys.

def test_openai_request_shape(keyed):
    with LoopbackServer(openai_chat(lambda prompt: f"echo: {prompt}")) as server:
        model = gpt(server, system="Be brief.", temperature=0.2, max_tokens=64, extra_body={"seed": 7})
        assert model("hello there") == "echo: hello there"
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {"model": "gpt-test", "temperature": 0.2, "max_tokens": 64, "seed": 7,
                            "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "hello there"}]}
    assert model.name == "gpt-test"


def test_a_model_sent_to_another_process_answers_there_with_slots_of_its_own(keyed):
    """The process and Ray executors pickle a spec's model client: its locks made every such run fail."""
    with LoopbackServer(openai_chat(lambda prompt: f"echo: {prompt}")) as server:
        model = gpt(server, max_concurrency=3)
        assert model("warm") == "echo: warm"  # a client with connections open pickles as its settings
        copy = pickle.loads(pickle.dumps(model))
        assert copy("hello") == "echo: hello" and copy.max_concurrency == 3 and copy._slots is not model._slots
    assert copy.usage.calls == 2 and model.usage.calls == 1  # each counts its own, from what it had


def test_openai_leaves_out_unset_options_and_reads_list_content(keyed):
    parts = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "b"}]}}]}
    with LoopbackServer(openai_chat(lambda prompt: Response(body=parts))) as server:
        assert gpt(server)("hi") == "ab"
    assert set(server.requests[0].json) == {"model", "messages"}


def test_anthropic_request_shape_and_text_blocks(keyed):
    with LoopbackServer(anthropic_messages(lambda prompt: prompt.upper())) as server:
        model = claude("claude-test", base_url=server.url + "/", system="Be brief.", temperature=0.0, **FAST)
        assert model("hi you") == "HI YOU"
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {"model": "claude-test", "max_tokens": 4096, "system": "Be brief.", "temperature": 0.0,
                            "messages": [{"role": "user", "content": "hi you"}]}


def test_anthropic_joins_only_text_blocks_and_counts_cached_input(keyed):
    body = {"type": "message", "role": "assistant", "stop_reason": "end_turn",
            "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "one "},
                        {"type": "tool_use", "id": "t", "name": "x", "input": {}}, {"type": "text", "text": "two"}],
            "usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 3}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=body))) as server:
        model = claude("claude-test", base_url=server.url + "/v1", **FAST)
        assert model("q") == "one two"
    assert server.requests[0].path == "/v1/messages"
    assert (model.usage.input_tokens, model.usage.output_tokens) == (105, 3)


def test_deepseek_uses_its_own_variables(monkeypatch):
    with LoopbackServer(openai_chat(lambda prompt: "ok")) as server:
        model = deepseek(**FAST)
        monkeypatch.setenv("DEEPSEEK_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        assert model("hi") == "ok"
    (request,) = server.requests
    assert request.path == "/chat/completions" and request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json["model"] == "deepseek-chat"


def test_key_and_base_url_are_read_at_call_time(monkeypatch):
    model = openai_compatible("gpt-test", **FAST)
    with LoopbackServer(openai_chat(lambda prompt: "ok")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1/")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-first")
        model("a")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-second")
        model("b")
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer sk-first", "Bearer sk-second"]
    assert {r.path for r in server.requests} == {"/v1/chat/completions"}


@pytest.mark.parametrize("make, variable", [
    (lambda url: openai_compatible("m", base_url=url), "OPENAI_API_KEY"),
    (lambda url: deepseek(base_url=url), "DEEPSEEK_API_KEY"),
    (lambda url: claude("m", base_url=url), "ANTHROPIC_API_KEY"),
])
def test_a_missing_key_is_a_user_error_naming_the_variable(make, variable):
    with LoopbackServer(openai_chat(lambda prompt: "ok")) as server, \
            pytest.raises(UserError, match=f"export {variable}="):
        make(server.url)("hi")
    assert server.requests == []


def test_a_key_copied_with_its_bearer_word_is_sent_once_as_a_bearer_key(monkeypatch):
    """A key copied from a request's header was sent as "Bearer Bearer sk-...", and refused."""
    monkeypatch.setenv("OPENAI_API_KEY", f"Bearer {KEY}")
    with LoopbackServer(openai_chat(lambda prompt: "ok")) as server:
        assert gpt(server)("hi") == "ok"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_key_variable_holding_only_the_bearer_word_is_no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "Bearer ")
    with LoopbackServer(openai_chat(lambda prompt: "ok")) as server, \
            pytest.raises(UserError, match='OPENAI_API_KEY holds only "Bearer"; export OPENAI_API_KEY='):
        gpt(server)("hi")
    assert server.requests == []


@pytest.mark.parametrize(("make", "options", "said"), [
    (openai_compatible, {"max_tokens": 0}, "max_tokens must be a whole number of tokens above 0"),
    (openai_compatible, {"temperature": float("nan")}, "temperature must be a number >= 0"),
    (claude, {"max_tokens": None}, "max_tokens must be a whole number of tokens above 0"),
    (claude, {"temperature": "0.7"}, "temperature must be a number >= 0"),
    (claude, {"backoff": (30, 2)}, r"backoff must be .* \(no shorter than the first\)"),
])
def test_sampling_options_a_provider_would_refuse_on_every_call_are_refused_where_the_client_is_made(make, options, said):
    with pytest.raises(UserError, match=said):
        make("m", **options)


def test_a_404_names_the_path_the_request_went_to_and_what_a_base_url_holds(keyed):
    with LoopbackServer(openai_chat(lambda prompt: Response(status=404, body="not found"))) as server, \
            pytest.raises(AgentError) as raised:
        openai_compatible("gpt-test", base_url=server.url + "/v1/chat/completions", max_retries=0, **FAST)("hi")
    assert "the request went to /v1/chat/completions/chat/completions" in str(raised.value)
    assert "most often ends in /v1, and holds no /chat/completions" in str(raised.value)


def test_a_server_without_auth_gets_no_key_header():
    with LoopbackServer(openai_chat(lambda prompt: "ok")) as server:
        assert gpt(server, api_key_env=None)("hi") == "ok"
    assert "authorization" not in server.requests[0].headers


def test_a_base_url_without_a_scheme_is_a_user_error(keyed):
    with pytest.raises(UserError, match="https://host/v1"):
        openai_compatible("m", base_url="localhost:8000/v1")("hi")


# Retries.

def test_429_with_retry_after_then_success(keyed):
    busy = Response(status=429, headers={"Retry-After": "0"}, body={"error": {"message": "slow down"}})
    with LoopbackServer(openai_chat(steps(busy, "ok"))) as server:
        model = gpt(server)
        assert model("hi") == "ok"
    assert len(server.requests) == 2
    assert (model.usage.calls, model.usage.failures) == (1, 0)


def test_500_twice_then_success(keyed):
    boom = Response(status=500, body="internal error")
    with LoopbackServer(openai_chat(steps(boom, boom, "ok"))) as server:
        assert gpt(server)("hi") == "ok"
    assert len(server.requests) == 3


def test_529_overloaded_is_retried_for_claude(keyed):
    overloaded = Response(status=529, body={"type": "error", "error": {"type": "overloaded_error"}})
    with LoopbackServer(anthropic_messages(steps(overloaded, "ok"))) as server:
        assert claude("claude-test", base_url=server.url, **FAST)("hi") == "ok"
    assert len(server.requests) == 2


def test_503_forever_fails_after_all_attempts(keyed):
    down = Response(status=503, body="upstream unavailable, try later")
    with LoopbackServer(openai_chat(lambda prompt: down)) as server:
        model = gpt(server, max_retries=2)
        with pytest.raises(AgentError) as raised:
            model("hi")
    assert len(server.requests) == 3
    message = str(raised.value)
    assert "503" in message and "upstream unavailable" in message and "3 attempts" in message
    assert "gpt-test" in message and f"{server.url}/v1/chat/completions" in message
    assert (model.usage.calls, model.usage.failures) == (1, 1)


def test_connection_refused_fails_after_retries(keyed):
    model = openai_compatible("gpt-test", base_url=closed_port_url(), max_retries=1, **FAST)
    with pytest.raises(AgentError, match="ConnectError") as raised:
        model("hi")
    assert "2 attempts" in str(raised.value)
    assert (model.usage.calls, model.usage.failures) == (1, 1)


@pytest.mark.parametrize("body, complaint", [
    ("<html>bad gateway page</html>", "not JSON"),
    ({"object": "chat.completion"}, "no choices"),
])
def test_a_malformed_body_is_retried_once_then_fails(keyed, body, complaint):
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body))) as server:
        model = gpt(server)
        with pytest.raises(AgentError, match=complaint):
            model("hi")
    assert len(server.requests) == 2
    assert (model.usage.calls, model.usage.failures) == (1, 1)


def test_a_malformed_body_once_then_a_good_one_succeeds(keyed):
    with LoopbackServer(openai_chat(steps(Response(body="oops"), "ok"))) as server:
        assert gpt(server)("hi") == "ok"


@pytest.mark.parametrize("content", [None, ""])
def test_an_empty_completion_fails(keyed, content):
    empty = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    with LoopbackServer(openai_chat(lambda prompt: Response(body=empty))) as server, \
            pytest.raises(AgentError, match="empty completion.*'stop'"):
        gpt(server)("hi")


def test_an_empty_claude_reply_fails(keyed):
    with LoopbackServer(anthropic_messages(lambda prompt: "")) as server, \
            pytest.raises(AgentError, match="empty completion"):
        claude("claude-test", base_url=server.url, **FAST)("hi")


def test_a_reply_cut_at_the_output_limit_fails_once_naming_the_option(keyed):
    """A reply the server stopped at max_tokens is not the answer: a file or rule cut mid-way,
    taken whole, would lose its end. It fails without a retry (the same prompt is cut again)."""
    long = "one two three four five six"
    with LoopbackServer(anthropic_messages(lambda prompt: long)) as server:
        model = claude("claude-test", base_url=server.url, max_tokens=4, **FAST)
        with pytest.raises(AgentError, match=r"stop_reason 'max_tokens' \(max_tokens=4\).*raise it with max_tokens=8"):
            model("hi")
        assert len(server.requests) == 1 and (model.usage.calls, model.usage.failures) == (1, 1)
        assert claude("claude-test", base_url=server.url, max_tokens=6, **FAST)("hi") == long
    with LoopbackServer(openai_chat(lambda prompt: long)) as server:
        with pytest.raises(AgentError, match=r"finish_reason 'length' \(4 tokens\).*not the whole answer"):
            gpt(server, max_tokens=4)("hi")
        assert len(server.requests) == 1
        cut = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "one two"}, "finish_reason": "length"}]}
    with LoopbackServer(openai_chat(lambda prompt: Response(body=cut))) as server, \
            pytest.raises(AgentError, match="the server's default limit.*raise it with max_tokens=8192"):
        gpt(server)("hi")


@pytest.mark.parametrize("kind", ["openai", "claude"])
def test_a_client_a_spec_made_says_to_raise_its_limit_in_its_own_fields_options(keyed, monkeypatch, kind):
    """A reflector's reply cut at its max_tokens told to raise it in "the agent's options", which
    the reflector of a spec with a reflector of its own does not read."""
    long = "one two three four five six"
    wire = openai_chat if kind == "openai" else anthropic_messages
    with LoopbackServer(wire(lambda prompt: long)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        for field in ("reflector", "agent"):
            client = make_client(AgentSpec(kind=kind, model="m", options={"max_tokens": 4, "max_retries": 0}), field)
            with pytest.raises(AgentError) as caught:
                client("hi")
            assert f"raise it with max_tokens=8 (in the run spec: the {field}'s options: {{max_tokens: 8}})" in str(caught.value)
        with pytest.raises(AgentError) as caught:  # made in Python: no spec to name
            (gpt(server, max_tokens=4) if kind == "openai" else claude("m", base_url=server.url, max_tokens=4, **FAST))("hi")
        assert "raise it with max_tokens=8 where the client is made" in str(caught.value)
        assert "spec" not in str(caught.value)


@pytest.mark.parametrize("reply, answer", [
    ("<think>\nThe team for refunds is billing.\n</think>\n\nbilling", "billing"),
    ("  <think>a draft: <rule>Guess.</rule></think><rule>Name the team.</rule>", "<rule>Name the team.</rule>"),
    ("The request is about a refund.\n</think>\n\nbilling", "billing"),  # the template opened the block
    ("Write <think> and </think> around your notes.", "Write <think> and </think> around your notes."),
    ("billing", "billing"),
])
def test_reasoning_a_model_served_raw_writes_first_is_not_its_answer(keyed, reply, answer):
    with LoopbackServer(openai_chat(lambda prompt: reply)) as server:
        assert gpt(server)("hi") == answer


def test_a_reply_that_is_all_reasoning_is_an_empty_completion(keyed):
    with LoopbackServer(openai_chat(lambda prompt: "<think>Still thinking about it</think>")) as server, \
            pytest.raises(AgentError, match="empty completion"):
        gpt(server)("hi")


def test_401_is_not_retried_and_names_the_key_variable(keyed):
    denied = Response(status=401, body={"error": {"message": f"Incorrect API key provided: {KEY}"}})
    with LoopbackServer(openai_chat(lambda prompt: denied)) as server:
        model = gpt(server)
        with pytest.raises(AgentError) as raised:
            model("hi")
    assert len(server.requests) == 1
    message = str(raised.value)
    assert "401" in message and "check OPENAI_API_KEY" in message and "1 attempt" in message
    assert KEY not in message and KEY not in repr(model) and KEY not in repr(vars(model))
    assert KEY not in repr(model.usage)


@pytest.mark.parametrize("status", [400, 404])
def test_other_client_errors_are_not_retried(keyed, status):
    refused = Response(status=status, body="no such model")
    with LoopbackServer(openai_chat(lambda prompt: refused)) as server, \
            pytest.raises(AgentError, match=f"HTTP {status} .*no such model"):
        gpt(server)("hi")
    assert len(server.requests) == 1


def test_the_query_string_stays_out_of_error_messages(keyed):
    with LoopbackServer(openai_chat(lambda prompt: Response(status=502))) as server:
        model = openai_compatible("gpt-test", base_url=server.url + "/v1?api-key=hunter2", max_retries=0, **FAST)
        with pytest.raises(AgentError) as raised:
            model("hi")
    assert server.requests[0].query == {"api-key": ["hunter2"]}
    assert "hunter2" not in str(raised.value) and "/v1/chat/completions" in str(raised.value)


# The deadline: `timeout` bounds the whole call. A loaded machine may be slow to notice it passed,
# so the checks allow seconds of slack, still far below when a trickling server would finish.

SLACK = 3.0


def completion(text):
    """An OpenAI chat completion's body, as bytes."""
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}).encode("utf-8")


def fails_at_the_deadline(model, timeout):
    """Call `model`, which must fail at its deadline; return the message."""
    start = time.monotonic()
    with pytest.raises(AgentError) as raised:
        model("hi")
    assert time.monotonic() - start < timeout + SLACK
    message = str(raised.value)
    assert f"deadline of {timeout:g} s" in message and "timeout=" in message and "where the client is made" in message
    assert (model.usage.calls, model.usage.failures) == (1, 1)
    return message


def test_a_hung_server_fails_at_the_deadline_without_a_retry(keyed):
    with LoopbackServer(openai_chat(lambda prompt: Response(delay=30, body="never sent"))) as server:
        # long enough for the request to reach the server on a loaded machine: it is the hang that must end it
        message = fails_at_the_deadline(gpt(server, timeout=2, max_retries=3), 2)
        waited = time.monotonic() + 5  # on a loaded machine the server's thread may log the request late
        while not server.requests and time.monotonic() < waited:
            time.sleep(0.01)
        assert len(server.requests) == 1
    assert "1 attempt" in message


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_server_trickling_its_reply_fails_at_the_deadline(keyed, headers_too):
    """A byte every 0.2 s: each read succeeds, so only a deadline on the whole call ends it (the
    whole reply would take over a minute)."""
    trickle = Response(body=completion("a reply that arrives one byte at a time " * 8), trickle=0.2,
                       trickle_headers=headers_too, headers={"content-type": "application/json"})
    with LoopbackServer(openai_chat(lambda prompt: trickle)) as server:
        fails_at_the_deadline(gpt(server, timeout=1.5), 1.5)
        assert len(server.requests) == 1


def test_a_retry_starts_only_if_its_wait_ends_before_the_deadline(keyed):
    busy = Response(status=503, headers={"Retry-After": "30"}, body="overloaded")
    with LoopbackServer(openai_chat(lambda prompt: busy)) as server:
        message = fails_at_the_deadline(gpt(server, timeout=2), 2)
        assert len(server.requests) == 1
    assert "HTTP 503" in message and "no time left to try again" in message


def test_retries_share_the_deadline(keyed):
    """Each attempt gets only the time the earlier ones left: three slow 500s end the call."""
    slow_error = Response(status=500, delay=0.6, body="internal error")
    with LoopbackServer(openai_chat(lambda prompt: slow_error)) as server:
        fails_at_the_deadline(gpt(server, timeout=1.5, max_retries=10), 1.5)
        assert 2 <= len(server.requests) <= 3


# The reply cap: `max_reply_chars` characters of text, and 8 bytes a character plus 64 KiB of body.

def huge_body(megabytes):
    """The chunks of a completion body that never ends before `megabytes` MB of text."""
    return lambda: itertools.chain([b'{"choices": [{"message": {"content": "'],
                                   itertools.repeat(b"x" * 2**16, megabytes * 16))


def test_a_huge_reply_is_cut_off_early_and_not_retried(keyed):
    with LoopbackServer(openai_chat(lambda prompt: Response(stream=huge_body(50)))) as server:
        model = gpt(server)
        tracemalloc.start()
        start = time.monotonic()
        try:
            with pytest.raises(AgentError) as raised:
                model("hi")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert time.monotonic() - start < 20
        assert len(server.requests) == 1
    message = str(raised.value)
    assert "8,065,536 bytes" in message and "max_reply_chars=1,000,000" in message
    assert "where the client is made" in message and "not retried" in message
    assert peak < 25 * 2**20  # the cut-off is 8 MB: the 50 MB body was never held
    assert (model.usage.calls, model.usage.failures) == (1, 1)


def test_a_reply_just_under_the_cap_comes_back_whole(keyed):
    text = "é" * 1000  # each sent JSON-escaped, six bytes: the byte cut-off leaves room for that
    with LoopbackServer(openai_chat(lambda prompt: text)) as server:
        assert gpt(server, max_reply_chars=1000)("hi") == text


def test_a_completion_over_max_reply_chars_fails_without_a_retry(keyed):
    with LoopbackServer(openai_chat(lambda prompt: "a" * 1001)) as server:
        model = gpt(server, max_reply_chars=1000)
        with pytest.raises(AgentError, match=r"1,001 characters, over max_reply_chars=1,000; not retried; raise it"):
            model("hi")
    assert len(server.requests) == 1
    assert (model.usage.calls, model.usage.failures) == (1, 1)


def test_a_body_past_the_byte_cut_off_fails_without_a_retry(keyed):
    padded = Response(body=completion("ok")[:-1] + b" " * 70_000 + b"}")  # 100 characters allow 66,336 bytes
    with LoopbackServer(openai_chat(lambda prompt: padded)) as server, \
            pytest.raises(AgentError, match=r"passed 66,336 bytes.*max_reply_chars=100\b"):
        gpt(server, max_reply_chars=100)("hi")
    assert len(server.requests) == 1


def test_an_error_body_is_capped_too(keyed):
    with LoopbackServer(openai_chat(lambda prompt: Response(status=502, stream=huge_body(20)))) as server, \
            pytest.raises(AgentError, match="max_reply_chars"):
        gpt(server)("hi")
    assert len(server.requests) == 1


@pytest.mark.parametrize("knobs", [{"timeout": 0}, {"timeout": -1}, {"timeout": float("nan")}, {"timeout": True},
                                   {"timeout": "30"}, {"max_reply_chars": 0}, {"max_reply_chars": -5},
                                   {"max_reply_chars": 1.5}, {"max_reply_chars": True}, {"max_reply_chars": "10"}])
def test_bad_limits_are_user_errors_saying_what_to_pass(knobs):
    (name,) = knobs
    for make in (lambda: openai_compatible("m", **knobs), lambda: deepseek(**knobs), lambda: claude("m", **knobs)):
        with pytest.raises(UserError, match=f"{name} must be .*such as"):
            make()


@pytest.mark.parametrize("kind", ["openai", "deepseek", "claude"])
def test_a_spec_sets_the_limits_through_the_agents_options(kind):
    agent = AgentSpec(kind=kind, model="m", options={"timeout": 30, "max_reply_chars": 200_000})
    client = make_client(agent)
    assert (client.timeout, client.max_reply_chars) == (30, 200_000)
    default = make_client(AgentSpec(kind=kind, model="m"))
    assert (default.timeout, default.max_reply_chars) == (300, 1_000_000)


# Usage, metering and concurrency.

def test_usage_comes_from_the_server_else_is_estimated(keyed):
    with LoopbackServer(openai_chat(lambda prompt: "three word reply")) as server:
        model = gpt(server, system="be kind")
        model("one two three four")
    assert (model.usage.input_tokens, model.usage.output_tokens) == (6, 3)
    plain = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a reply"}}]}
    with LoopbackServer(openai_chat(lambda prompt: Response(body=plain))) as server:
        model = gpt(server)
        model("a prompt of some length")
    assert model.usage.input_tokens == estimate_tokens("a prompt of some length")
    assert model.usage.output_tokens == estimate_tokens("a reply")
    assert model.usage.calls == 1 and model.usage.seconds > 0


def test_metering_collects_calls_made_inside_it_and_its_threads(keyed):
    meter = ModelUsage()
    with LoopbackServer(anthropic_messages(lambda prompt: "fine")) as server:
        model = claude("claude-test", base_url=server.url, **FAST)
        with metering(meter):
            model("first call")
            thread = threading.Thread(target=contextvars.copy_context().run, args=(model, "second call"))
            thread.start()
            thread.join()
        model("outside the meter")
    assert (meter.calls, model.usage.calls) == (2, 3)
    assert (meter.input_tokens, meter.output_tokens) == (4, 2)


def test_max_concurrency_bounds_requests_in_flight(keyed):
    chat, in_flight = openai_chat(lambda prompt: "ok"), InFlight()

    def counting(request):
        with in_flight:
            time.sleep(0.03)
        return chat(request)

    with LoopbackServer(counting) as server:
        model = gpt(server, max_concurrency=3)
        threads = [threading.Thread(target=model, args=(f"p{i}",)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(server.requests) == 16 and model.usage.calls == 16 and model.usage.failures == 0
    assert 1 <= in_flight.peak <= 3


# Small helpers.

def test_retry_after_reads_seconds_and_dates_and_caps_them():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("0") == 0.0
    assert retry_after_seconds("3600") == 60.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=5), usegmt=True), now=now) == 5.0
    assert retry_after_seconds(format_datetime(now - timedelta(hours=1), usegmt=True), now=now) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_join_url_appends_to_the_path_and_keeps_the_query():
    assert join_url("https://h/v1/", "/chat/completions") == "https://h/v1/chat/completions"
    assert join_url("https://h", "v1/messages") == "https://h/v1/messages"
    assert join_url("https://h/v1?k=1", "chat/completions") == "https://h/v1/chat/completions?k=1"


def test_the_key_never_reaches_the_logs_even_when_a_server_echoes_it(keyed, caplog):
    echo = Response(status=500, body={"error": f"upstream rejected key {KEY}"})
    with LoopbackServer(openai_chat(steps(echo, "fine"))) as server, caplog.at_level(logging.DEBUG):
        assert gpt(server)("hi") == "fine"
    assert any("attempt 1 failed" in r.getMessage() for r in caplog.records)
    assert all(KEY not in r.getMessage() for r in caplog.records)


# Hostile providers and keys that cannot be sent.

@pytest.mark.parametrize("key, said", [(f"{KEY}\nsecond-line-9", "a line break at position 28"),
                                       (f"{KEY}\tx", "a control character"), (f"{KEY}é", "a character outside ASCII")])
def test_a_key_no_header_can_carry_is_refused_before_anything_is_sent(monkeypatch, caplog, key, said):
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with LoopbackServer(openai_chat(lambda prompt: "never")) as server:
        with pytest.raises(UserError) as raised:
            gpt(server)("hi")
    assert server.requests == [] and f"the key in OPENAI_API_KEY holds {said}" in str(raised.value)
    assert "second-line" not in str(raised.value) + caplog.text and KEY not in str(raised.value) + caplog.text


def test_a_key_with_a_line_break_is_redacted_as_a_repr_writes_it(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", f"{KEY}\nsecond-line-9")
    assert redact(f"Illegal header value b'Bearer {KEY}\\nsecond-line-9'") == \
        "Illegal header value b'Bearer [redacted OPENAI_API_KEY]'"


def test_a_compressed_bomb_stops_at_the_cap_and_stacked_codings_are_not_read(keyed):
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = bomb.compress(b"\0" * (200 << 20)) + bomb.flush()  # 200 MB of zeros in about 200 KB
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body, headers={"Content-Encoding": "gzip"}))) as server:
        tracemalloc.start()
        try:
            with pytest.raises(AgentError, match="the reply passed 8,065,536 bytes"):
                gpt(server)("hi")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 40 << 20 and server.requests[0].headers["accept-encoding"] == "identity"
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body, headers={"Content-Encoding": "gzip, gzip"}))) as server:
        with pytest.raises(AgentError, match="the reply is «gzip, gzip»-encoded, which is not read"):
            gpt(server)("hi")


def test_one_compressed_layer_is_read(keyed):
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "inflated"}}]}
    body = packer.compress(json.dumps(reply).encode()) + packer.flush()
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body, headers={"Content-Encoding": "gzip"}))) as server:
        assert gpt(server)("hi") == "inflated"


def test_a_reply_nested_past_the_parser_is_a_bad_body_not_a_recursion_error(keyed):
    deep = b"[" * 200_000 + b"]" * 200_000
    with LoopbackServer(openai_chat(lambda prompt: Response(body=deep))) as server:
        with pytest.raises(AgentError, match="the body is not JSON"):
            gpt(server)("hi")


@pytest.mark.parametrize("count", [10**4000, 10**12, -5, True, "9"])
def test_a_token_count_no_call_can_have_is_estimated_instead(keyed, count):
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a reply"}}],
             "usage": {"prompt_tokens": count, "completion_tokens": count}}
    with LoopbackServer(openai_chat(lambda prompt: Response(body=json.dumps(reply)))) as server:
        model = gpt(server)
        model("a prompt")
    assert (model.usage.input_tokens, model.usage.output_tokens) == (estimate_tokens("a prompt"), estimate_tokens("a reply"))


def test_a_base_url_with_a_user_and_password_is_refused_and_never_shown(keyed):
    with pytest.raises(UserError) as raised:
        openai_compatible("m", base_url="http://proxy-user:Pr0xyPassw0rd@127.0.0.1:9/v1")("hi")
    assert "carries a user name or password" in str(raised.value) and "Pr0xyPassw0rd" not in str(raised.value)
    with pytest.raises(UserError) as raised:
        join_url("http://proxy-user:Pr0xyPassw0rd@[::zz]/v1?api-key=QUERYSECRET1", "chat/completions")
    assert "Pr0xyPassw0rd" not in str(raised.value) and "QUERYSECRET1" not in str(raised.value)


# Replies and headers no well-behaved server sends.

def test_a_lone_surrogate_in_a_reply_or_a_prompt_becomes_a_replacement_character(keyed):
    """No UTF-8 spells one: quoted back into the next prompt, it made that call fail to encode."""
    broken = Response(body=b'{"choices": [{"message": {"content": "x\\ud800y"}}]}')
    with LoopbackServer(openai_chat(lambda prompt: broken)) as server:
        model = gpt(server)
        assert model("hi") == "x\ufffdy"
    with LoopbackServer(openai_chat(lambda prompt: f"echo: {prompt}")) as server:
        assert gpt(server)("a\udc80b") == "echo: a\ufffdb"


def test_a_retry_after_date_past_any_year_is_unreadable_not_a_crash():
    assert retry_after_seconds("Wed, 21 Oct 99999999999999999999 07:28:00 GMT") is None


def test_an_error_body_in_a_charset_that_is_no_text_encoding_is_read_as_utf8_and_retried(keyed):
    busy = Response(status=503, headers={"content-type": "text/html; charset=hex"}, body=b"down for a bit")
    with LoopbackServer(openai_chat(steps(busy, "ok"))) as server:
        model = gpt(server)
        assert model("hi") == "ok"
    assert len(server.requests) == 2 and (model.usage.calls, model.usage.failures) == (1, 0)


@pytest.mark.parametrize("knobs", [{"backoff": (-1, -1)}, {"backoff": (1,)}, {"backoff": "fast"},
                                   {"backoff": (0.5, float("inf"))}, {"max_retries": "3"}, {"max_retries": -1},
                                   {"max_concurrency": 0}, {"max_concurrency": 2.5}])
def test_bad_retry_settings_are_user_errors_saying_what_to_pass(knobs):
    (name,) = knobs
    with pytest.raises(UserError, match=f"{name} must be .*such as"):
        openai_compatible("m", **knobs)
