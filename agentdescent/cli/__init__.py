"""The `agentdescent` command line: the verbs, what they show, and the offline demo's run.

`main` imports the verbs when it is called, not when this package is imported: a process that
imports `agentdescent.cli.demo` for the reference domain's old names does not import every verb,
the run service and rich with them; and a Ctrl-C while they import ends the command as one during
a verb does, with exit code 130 and no traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

INTERRUPTED = 130  # as `cli.guard` ends a verb the user interrupted

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The `agentdescent` command (`agentdescent.cli.main.main`), its exit code."""
    try:
        from agentdescent.cli.main import main as command

        return command(argv)
    except KeyboardInterrupt:  # before `guarded` runs the verb, which says it for itself
        sys.stderr.write("interrupted\n")
        return INTERRUPTED
