"""AgentDescent's MCP server (`agentdescent-mcp`): the run service's verbs as tools for a coding agent.

The tools live in `server`; this package holds nothing else, so that every tool stays a thin
layer over `agentdescent.runs.Service`, which the CLI uses too.
"""

from agentdescent_mcp.server import INSTRUCTIONS, main, server

__all__ = ["INSTRUCTIONS", "main", "server"]
