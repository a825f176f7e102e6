"""What a failed call's error says of its cause (`limits.cause`), read from the errors the HTTP
clients really raise against servers on 127.0.0.1: the run's stop rules decide on it."""

from __future__ import annotations

import pytest

from agentdescent.agents.anthropic import claude
from agentdescent.agents.limits import cause
from agentdescent.agents.openai_compat import openai_compatible
from agentdescent.errors import AgentError
from tests.loopback import LoopbackServer, closed_port_url, error_response

pytestmark = pytest.mark.usefixtures("no_provider_env")


@pytest.mark.parametrize("answer, anthropic, status, lasting, sent, fix", [
    (error_response(401, "Incorrect API key provided"), False, 401, True, False, "the key is refused (HTTP 401)"),
    (error_response(403, "permission denied", anthropic=True), True, 403, True, False, "the key is refused (HTTP 403)"),
    (error_response(404, "The model `gpt-x` does not exist"), False, 404, True, False, "check the model's name and the base URL"),
    (error_response(400, "This model's maximum context length is 8192 tokens. However, your messages resulted in 8200 "
                         "tokens."), False, 400, True, True, "shrink the artifact, or use a model with a longer context"),
    (error_response(400, "prompt is too long: 203524 tokens > 200000 maximum", anthropic=True), True, 400, True, True,
     "the prompt is too long for the model (HTTP 400)"),
    (error_response(400, "temperature must be at most 2"), False, 400, True, True, "its answer, in the error, says why"),
    (error_response(429, "Rate limit reached"), False, 429, False, False,
     "the provider kept the calls rate limited (HTTP 429) past their deadline: lower max_concurrency"),
    (error_response(529, "Overloaded", anthropic=True), True, 529, False, False, "kept the calls overloaded (HTTP 529)"),
    (error_response(503, "Service Unavailable"), False, 503, False, False, "the server kept failing (HTTP 503)"),
])
def test_each_way_a_server_refuses_a_call_is_told_apart_with_its_fix(monkeypatch, answer, anthropic, status, lasting,
                                                                      sent, fix):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-4f1c0ffee0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-4f1c0ffee0123456789")
    seen = []
    with LoopbackServer(lambda request: seen.append(request) or answer) as server:
        options = {"max_retries": 1, "backoff": (0.001, 0.002), "timeout": 1}  # a 429 or 529 is waited out till then
        model = claude("claude-x", base_url=server.url, **options) if anthropic else \
            openai_compatible("gpt-x", base_url=server.url + "/v1", **options)
        with pytest.raises(AgentError) as raised:
            model("hello")
    found = cause(f"run failed on task «t1»: AgentError: {raised.value}")  # as a rollout's error quotes it
    assert (found.status, found.lasting, found.sent) == (status, lasting, sent) and fix in found.fix
    assert len(seen) == 1 if lasting else len(seen) >= 2  # what the client retried is what may pass


def test_a_failure_that_names_no_status_has_no_cause(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-4f1c0ffee0123456789")
    model = openai_compatible("gpt-x", base_url=closed_port_url() + "/v1", max_retries=0)
    with pytest.raises(AgentError) as raised:  # the connection refused: no server answered
        model("hello")
    assert cause(str(raised.value)) is None
    assert cause("ValueError: the user's code says HTTP 400") is None
