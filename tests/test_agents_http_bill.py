"""What an HTTP call costs and says when its reply cannot be used: the tokens of every reply the
server billed, a call waiting for a slot not yet on the bill, and the secrets a server may quote
back (a key cut in half, the base URL's password and query) kept out of every message."""

from __future__ import annotations

import contextvars
import re
import threading
import time

import pytest

from agentdescent.agents.anthropic import claude
from agentdescent.agents.base import before_each_call, estimate_tokens
from agentdescent.agents.openai_compat import openai_compatible
from agentdescent.errors import AgentError, UserError
from agentdescent.runs.spec import AgentSpec
from tests.loopback import LoopbackServer, Response, anthropic_messages, openai_chat
from tests.test_agents_http import FAST, gpt

KEY = "sk-ant-api03-PROBESECRET0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"  # long: a quote's cut falls inside it

pytestmark = pytest.mark.usefixtures("no_provider_env")


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def chat_body(content, finish="stop", usage=None, **message):
    body = {"choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content, **message}}]}
    return body if usage is None else {**body, "usage": usage}


def shows_part_of(text: str, secret: str, size: int = 12) -> bool:
    return any(secret[i:i + size] in text for i in range(len(secret) - size + 1))


# The bill.

def test_a_reply_cut_at_its_output_limit_bills_the_tokens_the_server_counted(keyed):
    cut = {"content": [{"type": "text", "text": "half a rule"}], "stop_reason": "max_tokens",
           "usage": {"input_tokens": 1000, "output_tokens": 4096}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=cut))) as server:
        model = claude("claude-test", base_url=server.url, **FAST)
        with pytest.raises(AgentError, match="output limit"):
            model("hi")
    assert (model.usage.calls, model.usage.failures) == (1, 1)
    assert (model.usage.input_tokens, model.usage.output_tokens) == (1000, 4096)


def test_an_empty_completion_tried_again_bills_both_replies(keyed):
    empty = Response(body=chat_body("", usage={"prompt_tokens": 500, "completion_tokens": 0}))
    with LoopbackServer(openai_chat(lambda prompt: empty)) as server:
        model = gpt(server)
        with pytest.raises(AgentError, match="empty completion"):
            model("hi")
    assert len(server.requests) == 2 and (model.usage.calls, model.usage.input_tokens) == (1, 1000)
    replies = iter([empty, Response(body=chat_body("fine", usage={"prompt_tokens": 500, "completion_tokens": 3}))])
    with LoopbackServer(openai_chat(lambda prompt: next(replies))) as server:
        model = gpt(server)
        assert model("hi") == "fine"
    assert (model.usage.calls, model.usage.failures, model.usage.input_tokens, model.usage.output_tokens) == (1, 0, 1000, 3)


THOUGHT = "Let me think about this. " * 300
SPENT = {"prompt_tokens": 100, "completion_tokens": 1000, "completion_tokens_details": {"reasoning_tokens": 1000}}


@pytest.mark.parametrize("kind, body, said", [
    ("openai", chat_body("", finish="length", usage=SPENT, reasoning_content=THOUGHT),
     r"finish_reason 'length' \(1000 tokens\), all spent on reasoning before any answer; raise it with max_tokens=2000"),
    ("openai", chat_body("", finish="length", usage=SPENT),  # OpenAI's own reasoning models send only the count
     r"finish_reason 'length' \(1000 tokens\), all spent on reasoning before any answer; raise it with max_tokens=2000"),
    ("openai", chat_body(None, finish="length", usage={"prompt_tokens": 100, "completion_tokens": 1000}),
     r"finish_reason 'length' \(1000 tokens\), before any answer; raise it with max_tokens=2000"),
    ("openai", chat_body(None, finish="content_filter", usage={"prompt_tokens": 100, "completion_tokens": 1000}),
     "finish_reason 'content_filter': the provider's filter withheld the whole reply.*not retried"),
    ("claude", {"content": [{"type": "thinking", "thinking": THOUGHT, "signature": "s"}], "stop_reason": "max_tokens",
                "usage": {"input_tokens": 100, "output_tokens": 1000}},
     r"stop_reason 'max_tokens' \(max_tokens=1000\), all spent on thinking before any answer; raise it with max_tokens=2000"),
])
def test_a_reply_stopped_before_any_answer_fails_at_once_and_is_billed_once(keyed, kind, body, said):
    """A reasoning model whose thinking took all of max_tokens sends an empty answer cut at the
    limit: it was read as an empty body, asked for again (billed twice, cut again) and named as
    one. It is a cut reply, saying what the tokens went on and what to raise max_tokens to."""
    handler = (openai_chat if kind == "openai" else anthropic_messages)(lambda prompt: Response(body=body))
    with LoopbackServer(handler) as server:
        model = gpt(server, max_tokens=1000) if kind == "openai" else claude("c", base_url=server.url, max_tokens=1000, **FAST)
        with pytest.raises(AgentError, match=said):
            model("hi")
    assert len(server.requests) == 1
    assert (model.usage.calls, model.usage.failures, model.usage.input_tokens, model.usage.output_tokens) == (1, 1, 100, 1000)


@pytest.mark.parametrize("stop, said", [
    ("model_context_window_exceeded", "filled the model's context window, so the reply is cut; shorten the prompt"),
    ("pause_turn", "stop_reason 'pause_turn': the server paused the turn before its end"),
    ("tool_use", "asked for a tool, and none is offered"),
    ("a_reason_added_later", r"stop_reason «'a_reason_added_later'»: not one that ends a finished answer \(end_turn"),
])
def test_a_claude_reply_is_used_only_when_its_stop_reason_says_it_is_finished(keyed, stop, said):
    """A judge's "Score: 1", cut by the context window from "Score: 10", was read as a whole
    answer: a wrong reward, silently; a reflector's cut rule, a proposal."""
    cut = {"content": [{"type": "text", "text": "The answer is right.\nScore: 1"}], "stop_reason": stop,
           "usage": {"input_tokens": 100, "output_tokens": 50}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=cut))) as server:
        model = claude("c", base_url=server.url, **FAST)
        with pytest.raises(AgentError, match=f"{said}.*not retried"):
            model("hi")
    assert len(server.requests) == 1 and (model.usage.failures, model.usage.output_tokens) == (1, 50)


@pytest.mark.parametrize("stop", ["end_turn", "stop_sequence", None])
def test_a_claude_reply_finished_or_naming_no_stop_reason_is_the_answer(keyed, stop):
    whole = {"content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "4"}],
             "stop_reason": stop, "usage": {"input_tokens": 10, "output_tokens": 5}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=whole))) as server:
        assert claude("c", base_url=server.url, **FAST)("2+2?") == "4"


@pytest.mark.parametrize("finish, said", [
    ("abort", "finish_reason 'abort': the server dropped the request before its answer was finished"),
    ("error", "finish_reason 'error': the server failed while writing the answer"),
    ("a_reason_added_later", r"finish_reason «'a_reason_added_later'»: not one that ends a finished answer \(stop"),
], ids=["abort", "error", "unknown"])
def test_an_openai_reply_is_used_only_when_its_finish_reason_says_it_is_finished(keyed, finish, said):
    """vLLM's "abort" and others' "error" end a reply unfinished: its text was taken for the
    answer, a judge's "Score: 1" cut from "Score: 10" a wrong reward, silently."""
    body = chat_body("The answer is right.\nScore: 1", finish=finish, usage={"prompt_tokens": 100, "completion_tokens": 50})
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body))) as server:
        model = gpt(server)
        with pytest.raises(AgentError, match=f"{said}.*not retried"):
            model("hi")
    assert len(server.requests) == 1 and (model.usage.failures, model.usage.output_tokens) == (1, 50)


@pytest.mark.parametrize("finish", ["stop", "eos", "eos_token", "tool_calls", "function_call", None])
def test_an_openai_reply_finished_or_naming_no_finish_reason_is_the_answer(keyed, finish):
    with LoopbackServer(openai_chat(lambda prompt: Response(body=chat_body("4", finish=finish)))) as server:
        assert gpt(server)("2+2?") == "4"


@pytest.mark.parametrize("finish", ["tool_calls", "function_call"])
def test_an_openai_reply_asking_for_a_tool_with_no_text_is_not_asked_again(keyed, finish):
    """It was asked again as an empty completion, billed twice, and asked for the tool again."""
    body = chat_body(None, finish=finish, tool_calls=[{"id": "c1", "type": "function",
                                                       "function": {"name": "search", "arguments": "{}"}}])
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body))) as server:
        model = gpt(server)
        with pytest.raises(AgentError, match=f"finish_reason '{finish}': the model asked for a tool, and none is offered"):
            model("hi")
    assert len(server.requests) == 1


def test_an_empty_answer_after_reasoning_says_the_reasoning_held_text(keyed):
    body = chat_body("", reasoning_content="step " * 50)
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body))) as server, \
            pytest.raises(AgentError, match="empty completion .*its reasoning held text, its answer none"):
        gpt(server)("hi")


def test_without_usage_from_the_server_the_estimate_counts_the_system_prompt_and_the_reasoning(keyed):
    """The input was estimated from the user's prompt alone and the output from the answer alone:
    an 11,600-character system prompt and 10,000 characters of reasoning came to 3 and 1 tokens."""
    system, prompt, thought = "You are a careful assistant. " * 400, "What is 2+2?", "step " * 2000
    with LoopbackServer(openai_chat(lambda p: Response(body=chat_body("4", reasoning_content=thought)))) as server:
        model = gpt(server, system=system)
        assert model(prompt) == "4"
    assert (model.usage.input_tokens, model.usage.output_tokens) == (estimate_tokens(f"{system}\n{prompt}"),
                                                                     estimate_tokens(thought + "4"))
    raw = chat_body(f"<think>{thought}</think>4")  # a reasoning model served without a reasoning parser
    with LoopbackServer(openai_chat(lambda p: Response(body=raw))) as server:
        model = gpt(server)
        assert model(prompt) == "4"
    assert model.usage.output_tokens == estimate_tokens(f"<think>{thought}</think>4")
    thinking = {"content": [{"type": "thinking", "thinking": thought, "signature": "s"}, {"type": "text", "text": "4"}],
                "stop_reason": "end_turn"}
    with LoopbackServer(anthropic_messages(lambda p: Response(body=thinking))) as server:
        model = claude("c", base_url=server.url, system=system, **FAST)
        assert model(prompt) == "4"
    assert (model.usage.input_tokens, model.usage.output_tokens) == (estimate_tokens(f"{system}\n{prompt}"),
                                                                     estimate_tokens(thought + "4"))
    cut = chat_body("", finish="length", reasoning_content=thought)  # a reply not used is estimated so too
    with LoopbackServer(openai_chat(lambda p: Response(body=cut))) as server:
        model = gpt(server, system=system, max_tokens=1000)
        with pytest.raises(AgentError, match="all spent on reasoning"):
            model(prompt)
    assert (model.usage.input_tokens, model.usage.output_tokens) == (estimate_tokens(f"{system}\n{prompt}"),
                                                                     estimate_tokens(thought))


@pytest.mark.parametrize("usage, measured", [
    (None, (None, None)), ({"prompt_tokens": None}, (None, None)), ({"prompt_tokens": 77}, (77, None)),
    ({"prompt_tokens": 77, "completion_tokens": 9}, (77, 9)), ({"prompt_tokens": 77.0, "completion_tokens": 9.0}, (77, 9)),
    ({"prompt_tokens": 77.5, "completion_tokens": 9}, (None, 9))])
def test_the_tokens_an_openai_server_does_not_report_are_estimated_and_counted_as_estimates(keyed, usage, measured):
    """An estimate looked like a count (status said 10979 tokens, all of them guessed), and a count
    sent as 77.0 was thrown away for an estimate."""
    body = chat_body("y" * 40, usage=usage) if usage is not None else chat_body("y" * 40)
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body))) as server:
        model = gpt(server)
        model("hello world " * 10)
    guessed = (estimate_tokens("hello world " * 10), estimate_tokens("y" * 40))
    expected = [guess if count is None else count for count, guess in zip(measured, guessed)]
    assert (model.usage.input_tokens, model.usage.output_tokens) == tuple(expected)
    assert model.usage.estimated_tokens == sum(guess for count, guess in zip(measured, guessed) if count is None)


@pytest.mark.parametrize("usage, input_tokens, estimated", [
    ({"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 90}, 100, 0),
    ({"output_tokens": 7, "cache_read_input_tokens": 90}, 90, 0),  # the cache's count was lost for an estimate
    ({"output_tokens": 7, "cache_creation_input_tokens": 30.0}, 30, 0),
    ({"output_tokens": 7}, estimate_tokens("hello world " * 10), estimate_tokens("hello world " * 10))])
def test_a_claude_reply_counts_whichever_input_counts_it_reports_and_estimates_only_without_any(keyed, usage, input_tokens,
                                                                                                estimated):
    body = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": usage}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=body))) as server:
        model = claude("c", base_url=server.url, **FAST)
        model("hello world " * 10)
    assert (model.usage.input_tokens, model.usage.output_tokens, model.usage.estimated_tokens) == (input_tokens, 7, estimated)


def test_a_claude_reply_without_usage_is_estimated_whole_and_says_so(keyed):
    body = {"content": [{"type": "text", "text": "z" * 40}], "stop_reason": "end_turn"}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=body))) as server:
        model = claude("c", base_url=server.url, **FAST)
        model("hello world " * 10)
    assert model.usage.estimated_tokens == model.usage.tokens == estimate_tokens("hello world " * 10) + 10


def test_a_call_waiting_for_a_slot_is_not_on_the_bill_until_it_gets_one(keyed):
    """The start log and the budget sit in `before_each_call`: a call queued behind
    `max_concurrency` others, then abandoned with its run, was never made."""
    release, started = threading.Event(), []

    def held(prompt):
        release.wait(10)
        return "ok"

    with LoopbackServer(openai_chat(held)) as server:
        model = gpt(server, max_concurrency=1)

        def call():
            with before_each_call(lambda: started.append(time.monotonic())):
                model("hi")

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(call,)) for _ in range(3)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert len(started) == 1  # the other two wait for the one slot, not yet billed
        release.set()
        for thread in threads:
            thread.join(10)
    assert len(started) == 3 and model.usage.calls == 3 and len(server.requests) == 3


# What a message says.

def test_a_key_a_reply_quotes_is_redacted_before_the_quote_is_cut(keyed):
    echoed = {"error": {"message": f"the api key you sent, {KEY}, is not valid for this model " + "x" * 200}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=echoed))) as server:
        with pytest.raises(AgentError, match="no content list") as raised:
            claude("claude-test", base_url=server.url, **FAST)("hi")
    message = str(raised.value)
    assert "[redacted ANTHROPIC_API_KEY]" in message and not shows_part_of(message, KEY)


def test_the_base_urls_password_and_query_a_server_echoes_are_redacted(keyed, caplog):
    secret = "PROBE-SECRET-QUERY-777"

    def echo(prompt):
        return Response(status=502, body={"error": {"message": f"bad gateway for POST /v1/chat/completions?key={secret}"}})

    with LoopbackServer(openai_chat(echo)) as server, caplog.at_level("INFO"):
        model = openai_compatible("gpt-test", base_url=f"{server.url}/v1?key={secret}", max_retries=1, **FAST)
        with pytest.raises(AgentError) as raised:
            model("hi")
    assert server.requests[0].query == {"key": [secret]}
    assert "[redacted BASE_URL_SECRET]" in str(raised.value) and secret not in str(raised.value)
    assert "attempt 1 failed" in caplog.text and secret not in caplog.text


def test_a_proxy_the_client_cannot_use_is_a_user_error_naming_it(keyed, monkeypatch):
    monkeypatch.setenv("ALL_PROXY", "ftp://someone:PROXYPW-1234567@127.0.0.1:1")
    with LoopbackServer(openai_chat(lambda prompt: "never")) as server:
        with pytest.raises(UserError, match="proxy .*ALL_PROXY.*cannot be used") as raised:
            gpt(server)("hi")
    assert not server.requests and "PROXYPW-1234567" not in str(raised.value)


def test_a_retry_after_past_the_deadline_hints_a_timeout_that_covers_the_wait(keyed):
    busy = Response(status=503, headers={"Retry-After": "30"}, body="busy")
    with LoopbackServer(openai_chat(lambda prompt: busy)) as server:
        with pytest.raises(AgentError, match="no time left to try again") as raised:
            gpt(server, timeout=8)("hi")
    hinted = float(re.search(r"raise it with timeout=([\d.]+)", str(raised.value)).group(1))
    assert hinted >= 60 and len(server.requests) == 1


@pytest.mark.parametrize("body, said", [
    (chat_body(None, refusal="I can't help with that."), "the model refused: «I can't help with that.»"),
    (chat_body("The first half of a", finish="content_filter"), "content_filter.*ended it part-way"),
])
def test_a_refusal_and_a_filtered_reply_are_named_and_neither_taken_nor_tried_again(keyed, body, said):
    with LoopbackServer(openai_chat(lambda prompt: Response(body=body))) as server:
        with pytest.raises(AgentError, match=f"{said}.*not retried"):
            gpt(server)("hi")
    assert len(server.requests) == 1  # the same prompt is refused, or filtered, again


@pytest.mark.parametrize("content", [[], [{"type": "text", "text": "I won't"}]])
def test_a_claude_refusal_is_named_and_not_tried_again(keyed, content):
    declined = {"content": content, "stop_reason": "refusal", "usage": {"input_tokens": 7, "output_tokens": 2}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=declined))) as server:
        model = claude("claude-test", base_url=server.url, **FAST)
        with pytest.raises(AgentError, match="stop_reason 'refusal': the model declined"):
            model("hi")
    assert len(server.requests) == 1 and (model.usage.input_tokens, model.usage.output_tokens) == (7, 2)


def test_a_base_url_query_that_is_no_secret_is_left_in_replies_and_messages(keyed):
    """Every 8-character query value was redacted: `?api-version=2024-10-21` turned each date in
    a reply, and so in a proposal written back, into a marker."""
    said = "Use api-version 2024-10-21; dates after 2024-10-21 are fine."
    with LoopbackServer(openai_chat(lambda prompt: said)) as server:
        model = openai_compatible("gpt-test", base_url=f"{server.url}/v1?api-version=2024-10-21", **FAST)
        assert model("hi") == said


def test_a_redirect_says_where_it_points_without_its_query(keyed):
    """The hint named the whole endpoint as the base URL: followed, the path came twice."""
    moved = Response(status=301, headers={"Location": "https://api.example.com/v1/chat/completions?sig=abc123456789"})
    with LoopbackServer(openai_chat(lambda prompt: moved)) as server:
        with pytest.raises(AgentError, match="redirects to «https://api.example.com/v1/chat/completions»: point the "
                                             "base URL at «https://api.example.com», with the path") as raised:
            gpt(server)("hi")
    assert "abc123456789" not in str(raised.value) and len(server.requests) == 1
    here = Response(status=307, headers={"Location": "/v1/messages2"})
    with LoopbackServer(openai_chat(lambda prompt: here)) as server:
        with pytest.raises(AgentError, match="redirects to «/v1/messages2», on its own host: check the base URL's path"):
            gpt(server)("hi")


@pytest.mark.parametrize("url, said", [("http://u:PW-SECRET-1@127.0.0.1:9/v1", "a user name or password"),
                                       ("http://127.0.0.1:9/v1?api_key=QUERY-SECRET-2", "named like a credential"),
                                       ("http://127.0.0.1:9/v1?auth=QUERY-SECRET-3", "named like a credential"),
                                       ("http://127.0.0.1:9/v1?sig=QUERY-SECRET-4", "named like a credential")])
def test_a_spec_refuses_a_base_url_carrying_a_secret(url, said):
    with pytest.raises(ValueError, match=said):
        AgentSpec(kind="openai", model="m", options={"base_url": url})
    assert AgentSpec(kind="openai", model="m", options={"base_url": "http://h/v1?api-version=2024-02-01"})
