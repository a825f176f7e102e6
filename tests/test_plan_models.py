"""`plan` with `check_models`: each HTTP model's server is asked for its list of models (a GET,
no tokens) before a run pays. A key refused and a model the list leaves out are problems by
field; a server without a list is a warning; without the option nothing is asked."""

from __future__ import annotations

import anyio
import mcp
import pytest
from agentdescent_mcp.server import server

from agentdescent.runs.spec import SpecError
from tests import keyword_domain as domain
from tests.loopback import LoopbackServer, Request, Response
from tests.mcp_support import call, fails

KEY, SECRET = "AGENTDESCENT_TEST_MODELS_KEY", "sk-test-models-0123456789"
SERVED = ["gpt-test-mini", "gpt-test", "text-embedding-3", "whisper-1"]


def listing(ids: list[str] = SERVED, status: int = 200, body: object = None):
    def handle(request: Request) -> Response:
        if request.method != "GET" or not request.path.endswith("/models"):
            return Response(status=404, body={"error": "no route"})
        return Response(status=status, body=body if body is not None else {"data": [{"id": i} for i in ids]})
    return handle


def model(server: LoopbackServer, name: str, kind: str = "openai") -> dict:
    base = server.url + ("/v1" if kind == "openai" else "")
    return {"kind": kind, "model": name, "options": {"base_url": base, "api_key_env": KEY}}


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY, SECRET)


def test_a_listed_model_passes_and_nothing_but_the_list_is_asked(service, tmp_path):
    with LoopbackServer(listing()) as server:
        plan = service.plan(domain.spec(tmp_path, agent=model(server, "gpt-test")), check_models=True)
    assert plan.models[0].startswith("agent openai:gpt-test: 'gpt-test' is listed by http://127.0.0.1")
    assert "reflector python:tests.keyword_domain:next_rule: not asked" in plan.models[1]
    assert [(r.method, r.path) for r in server.requests] == [("GET", "/v1/models")]
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_a_model_the_server_does_not_list_is_a_problem_naming_close_names(service, tmp_path):
    with LoopbackServer(listing()) as server, pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, agent=model(server, "gpt-tset")), check_models=True)
    [problem] = caught.value.problems
    assert problem.field == "agent" and "'gpt-tset' is not among the 4 models" in problem.message
    assert "close names: gpt-test" in problem.message and "whisper-1" not in problem.message


def test_a_refused_key_is_a_problem_naming_its_variable_and_not_the_key(service, tmp_path):
    with LoopbackServer(listing(status=401, body={"error": f"bad key {SECRET}"})) as server, pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, reflector=model(server, "gpt-test")), check_models=True)
    [problem] = caught.value.problems
    assert problem.field == "reflector" and "HTTP 401, the key was refused; check " + KEY in problem.message
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(("status", "body", "said"), [
    (404, None, "HTTP 404, no list of models at /v1/models"),
    (200, {"object": "list"}, "the server does not list its models"),
    (500, None, "HTTP 500: the server does not list its models"),
])
def test_a_server_without_a_list_is_a_warning(service, tmp_path, status, body, said):
    with LoopbackServer(listing(status=status, body=body)) as server:
        plan = service.plan(domain.spec(tmp_path, agent=model(server, "gpt-test")), check_models=True)
    assert any(said in warning and "not checked" in warning for warning in plan.warnings), plan.warnings


def test_anthropic_is_asked_with_its_own_headers_and_path(service, tmp_path):
    with LoopbackServer(listing(["claude-test-20250101"])) as server:
        plan = service.plan(domain.spec(tmp_path, agent=model(server, "claude-test-20250101", "claude")),
                            check_models=True)
        with pytest.raises(SpecError):  # a refused key is refused whatever the provider
            server.handler = listing(status=403)
            service.plan(domain.spec(tmp_path, agent=model(server, "claude-test-20250101", "claude")), check_models=True)
    assert "is listed by" in plan.models[0]
    asked = server.requests[0]
    assert asked.path == "/v1/models" and asked.query == {"limit": ["1000"]}
    assert asked.headers["x-api-key"] == SECRET and asked.headers["anthropic-version"] and "authorization" not in asked.headers


def test_an_alias_anthropic_does_not_list_is_only_a_warning(service, tmp_path):
    with LoopbackServer(listing(["claude-test-4-20250101"])) as server:
        plan = service.plan(domain.spec(tmp_path, agent=model(server, "claude-test-4-0", "claude")), check_models=True)
    assert any("leaves out the aliases it serves" in warning for warning in plan.warnings), plan.warnings


def test_without_the_option_no_server_is_asked(service, tmp_path):
    with LoopbackServer(listing()) as server:
        plan = service.plan(domain.spec(tmp_path, agent=model(server, "gpt-tset")))
    assert server.requests == [] and plan.models == []


def test_the_plan_tool_takes_check_models(service, tmp_path):
    async def main(url: str) -> None:
        async with mcp.Client(server, mode="legacy") as client:
            spec = domain.spec(tmp_path, agent={"kind": "openai", "model": "gpt-tset",
                                                "options": {"base_url": url + "/v1", "api_key_env": KEY}})
            plan = await call(client, "plan", spec=spec)
            assert plan["models"] == []
            assert "close names: gpt-test" in await fails(client, "plan", spec=spec, check_models=True)

    with LoopbackServer(listing()) as listed:
        anyio.run(main, listed.url)
    assert len(listed.requests) == 1
