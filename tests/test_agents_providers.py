"""The providers' table is the one list of providers: its rows agree with the clients they make,
and everything that lists providers (the spec's agent kinds, redaction, doctor, the files that
cannot import the table) agrees with it."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from agentdescent.agents.cli_agents import CLIAgent
from agentdescent.agents.http import HTTPModel
from agentdescent.agents.providers import (
    BASE_URL_VARIABLES,
    CLI_KINDS,
    KEY_VARIABLES,
    MODEL_KINDS,
    PROVIDER_KINDS,
    PROVIDERS,
    Provider,
)
from agentdescent.agents.redact import KEY_VARIABLES as REDACTED
from agentdescent.errors import UserError
from agentdescent.runs import doctor, spec
from agentdescent.runs.wiring import make_client
from tests import conftest, docs_blocks

ROOT = Path(__file__).resolve().parents[1]
HTTP = [row for row in PROVIDERS.values() if row.kind == "http"]
CLI = [row for row in PROVIDERS.values() if row.kind == "cli"]


@pytest.mark.parametrize("row", HTTP, ids=lambda row: row.name)
def test_an_http_row_names_what_its_client_reads(row: Provider, monkeypatch):
    monkeypatch.delenv(row.base_url_variable, raising=False)
    client = row.client("m")
    assert isinstance(client, HTTPModel) and client.name == "m" and client.api_key_env == row.key_variable
    assert client._url().startswith(row.default_base_url.rstrip("/"))
    monkeypatch.setenv(row.base_url_variable, "http://127.0.0.1:9/base")
    assert client._url().startswith("http://127.0.0.1:9/base")


@pytest.mark.parametrize("row", CLI, ids=lambda row: row.name)
def test_a_cli_row_names_its_program_and_no_key_of_ours(row: Provider):
    agent = row.client(None, timeout=5)
    assert isinstance(agent, CLIAgent) and agent.executable == row.program and agent.timeout == 5
    assert row.key_variable is None and row.base_url_variable is None


def test_a_default_model_is_used_when_none_is_named_and_required_when_there_is_none():
    assert PROVIDERS["deepseek"].client(None).name == PROVIDERS["deepseek"].default_model
    with pytest.raises(UserError, match="needs a model name"):
        PROVIDERS["openai"].client(None)


def test_a_spec_builds_each_provider_through_its_row():
    for name, row in PROVIDERS.items():
        client = make_client(spec.AgentSpec(kind=name, model="m", options={"timeout": 7}))
        assert type(client) is type(row.client("m")) and client.timeout == 7


def test_the_lists_of_kinds_and_variables_are_read_from_the_rows():
    assert PROVIDER_KINDS == (*MODEL_KINDS, *CLI_KINDS) == tuple(PROVIDERS)
    assert set(typing.get_args(spec.AgentKind)) == {*PROVIDER_KINDS, "host", "python"}
    assert {row.key_variable for row in HTTP} | {"HF_TOKEN"} == set(KEY_VARIABLES)
    assert REDACTED is KEY_VARIABLES and doctor.KEYS is KEY_VARIABLES and doctor.ENDPOINTS is BASE_URL_VARIABLES


def test_the_lists_that_cannot_import_the_table_name_every_variable_of_it():
    """The Codex bundle passes these through Codex's scrubbed environment, and the tests clear
    them; a provider added to the table is added there too, or this fails."""
    everything = {*KEY_VARIABLES, *BASE_URL_VARIABLES}
    codex = tomllib.loads((ROOT / "plugins" / "codex" / "config.toml").read_text(encoding="utf-8"))
    assert everything <= set(codex["mcp_servers"]["agentdescent"]["env_vars"])
    assert everything <= set(conftest.PROVIDER_ENV)
    assert everything <= set(docs_blocks._CLEARED)


def forgot_return(prompt):
    prompt.upper()


def raw_bytes(prompt):
    return prompt.encode()


def never_awaited(prompt):
    async def call():
        return prompt
    return call()


@pytest.mark.parametrize("fn, why", [("forgot_return", "returned None; it must return its answer as text (a return missing?)"),
                                     ("raw_bytes", "returned bytes; it must return its answer as text (decode it"),
                                     ("never_awaited", "returned coroutine, not its answer")])
@pytest.mark.parametrize("field", ["agent", "reflector"])
def test_a_python_agent_whose_reply_is_no_text_stops_the_run_naming_it(fn, why, field):
    """Its str() was taken as the reply: "None", "b'...'" or "<coroutine ...>" scored 0 on every
    task, or was read as a rule, and the run finished with no failure and no warning."""
    ref = f"tests.test_agents_providers:{fn}"
    client = make_client(spec.AgentSpec(kind="python", ref=ref), field)
    with pytest.raises(UserError, match=re.escape(f"the {field} '{ref}' {why}")):
        client("route this")
