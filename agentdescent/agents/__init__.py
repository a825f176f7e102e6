"""Models and agents: HTTP completion clients, CLI agents, and a scripted stand-in for tests.

Every one is a plain callable (`prompt -> text`; CLI agents also take `cwd=`) that records its
usage; see `agentdescent.agents.base`.
"""

from agentdescent.agents.base import Model, ModelUsage, metering
from agentdescent.agents.scripted import ScriptedModel, scripted

__all__ = ["Model", "ModelUsage", "ScriptedModel", "metering", "scripted"]
