"""AgentDescent's MCP server (`agentdescent-mcp`, in `server`): the run service's verbs as tools for
a coding agent; and the hosts' SessionStart hook (`agentdescent-hook`, in `hook`).

Nothing is imported here, so that the hook, which must start fast, does not pay for the server.
"""
