"""The `agentdescent` command line: the verbs, what they show, and the offline demo domain."""

from agentdescent.cli.main import main

__all__ = ["main"]
