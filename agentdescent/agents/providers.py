"""The model providers, one row each: what the rest of the package needs to know of a provider
without importing its client.

    PROVIDERS["deepseek"].key_variable             == "DEEPSEEK_API_KEY"
    PROVIDERS["deepseek"].client(None, timeout=60)  # deepseek(model="deepseek-chat", timeout=60)

A run spec names a provider as an agent kind (`agent: openai:gpt-4o-mini`); redaction counts its
key variable as a key; `agentdescent doctor` lists its key and base URL variables; the run's
builder makes its client from the row. Adding a provider is one module (its client) and one row
here. The tables below (`PROVIDER_KINDS`, `MODEL_KINDS`, `CLI_KINDS`, `KEY_VARIABLES`,
`BASE_URL_VARIABLES`) are read from the rows.

This module imports nothing but the standard library: redaction imports it, and so does every
process that runs a rollout. A row names its factory as `module:function`, imported when a client
is first made. Left out: the clients themselves (`openai_compat`, `anthropic`, `cli_agents`), the
host and your own Python agents (run spec kinds `host` and `python`, which are no provider's).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agentdescent.errors import UserError

__all__ = ["BASE_URL_VARIABLES", "CLI_KINDS", "KEY_VARIABLES", "MODEL_KINDS", "PROVIDERS", "PROVIDER_KINDS", "Provider"]


@dataclass(frozen=True, kw_only=True)
class Provider:
    """One provider of models or agents.

    `kind` says how its clients are called: "http" is a model, `prompt -> text`; "cli" is a
    coding agent run as a subprocess, `(prompt, *, cwd) -> text`, which works in a folder.
    `make` names the function that builds a client as `make(model=..., **options)`. The client
    of an "http" provider reads its key from `key_variable` and its base URL from
    `base_url_variable` (else `default_base_url`) at each call: these are the function's own
    defaults, written again here for whoever must not import it (tests/test_agents_providers.py
    holds the two to the same values). `default_model` is used when a spec names none; an "http"
    provider without one needs the spec to name the model. A "cli" provider has no key variable
    of ours (the agent uses its own login) and names its executable in `program`.
    """

    name: str  # the agent kind a run spec names: `agent: NAME:MODEL`
    kind: Literal["http", "cli"]
    make: str  # "module:function", imported when a client is first made
    key_variable: str | None = None
    base_url_variable: str | None = None
    default_base_url: str | None = None
    default_model: str | None = None
    program: str | None = None  # a "cli" provider's executable, looked up on PATH

    def factory(self) -> Callable[..., Callable[..., str]]:
        """The function `make` names, imported now."""
        module, _, function = self.make.partition(":")
        return getattr(importlib.import_module(module), function)

    def option_default(self, name: str) -> Any:
        """The factory's default for its keyword `name` (None when it has no such keyword)."""
        parameter = inspect.signature(self.factory()).parameters.get(name)
        return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default

    def client(self, model: str | None = None, **options: Any) -> Callable[..., str]:
        """A client of this provider for `model` (else `default_model`), built with `options`
        (the factory's keyword arguments: `timeout=`, `system=`, `api_key_env=`, ...)."""
        chosen = model or self.default_model
        if self.kind == "http" and not chosen:
            raise UserError(f"a {self.name} model needs a model name, e.g. '{self.name}:<model>'")
        return self.factory()(model=chosen, **options)


PROVIDERS: dict[str, Provider] = {row.name: row for row in (
    Provider(name="openai", kind="http", make="agentdescent.agents.openai_compat:openai_compatible",
             key_variable="OPENAI_API_KEY", base_url_variable="OPENAI_BASE_URL",
             default_base_url="https://api.openai.com/v1"),
    Provider(name="deepseek", kind="http", make="agentdescent.agents.openai_compat:deepseek",
             key_variable="DEEPSEEK_API_KEY", base_url_variable="DEEPSEEK_BASE_URL",
             default_base_url="https://api.deepseek.com", default_model="deepseek-chat"),
    Provider(name="claude", kind="http", make="agentdescent.agents.anthropic:claude",
             key_variable="ANTHROPIC_API_KEY", base_url_variable="ANTHROPIC_BASE_URL",
             default_base_url="https://api.anthropic.com"),
    Provider(name="claude_code", kind="cli", make="agentdescent.agents.cli_agents:claude_code", program="claude"),
    Provider(name="codex", kind="cli", make="agentdescent.agents.cli_agents:codex", program="codex"),
)}

PROVIDER_KINDS = tuple(PROVIDERS)  # every provider, as a run spec's agent kind
MODEL_KINDS = tuple(name for name, row in PROVIDERS.items() if row.kind == "http")  # text in, text out
CLI_KINDS = tuple(name for name, row in PROVIDERS.items() if row.kind == "cli")  # agents that work in a folder

# The Hugging Face datasets server (`dataloader.hf_rows`) is no model provider, but its token is a
# key and its endpoint an address the package reads from the environment too.
KEY_VARIABLES = (*(row.key_variable for row in PROVIDERS.values() if row.key_variable), "HF_TOKEN")
BASE_URL_VARIABLES = (*(row.base_url_variable for row in PROVIDERS.values() if row.base_url_variable), "HF_ENDPOINT")
