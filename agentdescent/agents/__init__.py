"""Models and agents: HTTP completion clients, CLI agents, and a scripted stand-in for tests.

    openai_compatible(model)   any chat-completions server (OpenAI, DeepSeek, GLM, vLLM, llama.cpp)
    deepseek(model)            the same, with DeepSeek's variables
    claude(model)              the Anthropic Messages API
    claude_code(), codex()     coding agents run as subprocesses in a workspace folder
    scripted(...)              a deterministic model for tests and examples
    redact(text)               the text with every configured key, in any encoding, replaced

Every one is a plain callable (`prompt -> text`; CLI agents also take `cwd=`) that records its
usage; see `agentdescent.agents.base`. What the clients return and raise is already redacted.
`agentdescent.agents.providers` is the table of the providers, one row each: the agent kinds a
run spec names, their key and base URL variables, and the function that makes each client.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import by_name, lazy

# Light, and `scripted` is also its module's name: imported now, so the name stays the function.
from agentdescent.agents.base import Model, ModelUsage, metering
from agentdescent.agents.redact import redact
from agentdescent.agents.scripted import ScriptedModel, scripted

if TYPE_CHECKING:  # imported when first used (httpx, subprocess plumbing): see `agentdescent._exports`
    from agentdescent.agents.anthropic import Claude, claude
    from agentdescent.agents.cli_agents import ClaudeCode, Codex, claude_code, codex
    from agentdescent.agents.openai_compat import OpenAICompatible, deepseek, openai_compatible

_WHERE = by_name({
    "agentdescent.agents.anthropic": "Claude claude",
    "agentdescent.agents.cli_agents": "ClaudeCode Codex claude_code codex",
    "agentdescent.agents.openai_compat": "OpenAICompatible deepseek openai_compatible",
})
__getattr__, __dir__ = lazy(__name__, _WHERE)

__all__ = [
    "Claude",
    "ClaudeCode",
    "Codex",
    "Model",
    "ModelUsage",
    "OpenAICompatible",
    "ScriptedModel",
    "claude",
    "claude_code",
    "codex",
    "deepseek",
    "metering",
    "openai_compatible",
    "redact",
    "scripted",
]
