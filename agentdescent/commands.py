"""The `agentdescent ...` command lines we suggest in messages, statuses and tool results, quoted
for a POSIX shell, so that pasting one runs that command and nothing else, whatever a path holds.

    command("restore", "/tmp/skill; touch PWNED #")  ==  "agentdescent restore '/tmp/skill; touch PWNED #'"

Left out: running them. The SessionStart hook (`agentdescent_mcp.hook`) quotes its one command
the same way without importing this package; a test keeps the two in step.
"""

from __future__ import annotations

import os
import shlex

PROGRAM = "agentdescent"


def command(*args: str | os.PathLike[str] | int) -> str:
    """`agentdescent` and its arguments as one shell-quoted line."""
    return shlex.join([PROGRAM, *(os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args)])
