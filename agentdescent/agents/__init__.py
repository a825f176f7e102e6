"""Models and agents: HTTP completion clients, CLI agents, and a scripted stand-in for tests.

    openai_compatible(model)   any chat-completions server (OpenAI, DeepSeek, GLM, vLLM, llama.cpp)
    deepseek(model)            the same, with DeepSeek's variables
    claude(model)              the Anthropic Messages API
    claude_code(), codex()     coding agents run as subprocesses in a workspace folder
    scripted(...)              a deterministic model for tests and examples
    redact(text)               the text with every configured key, in any encoding, replaced

Every one is a plain callable (`prompt -> text`; CLI agents also take `cwd=`) that records its
usage; see `agentdescent.agents.base`. What the clients return and raise is already redacted.
"""

from agentdescent.agents.anthropic import Claude, claude
from agentdescent.agents.base import Model, ModelUsage, metering
from agentdescent.agents.cli_agents import ClaudeCode, Codex, claude_code, codex
from agentdescent.agents.openai_compat import OpenAICompatible, deepseek, openai_compatible
from agentdescent.agents.redact import redact
from agentdescent.agents.scripted import ScriptedModel, scripted

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
