"""`python -m agentdescent_mcp`: the MCP server over stdio, as `agentdescent-mcp` runs it."""

from agentdescent_mcp.server import main

if __name__ == "__main__":
    main()
