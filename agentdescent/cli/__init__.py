"""The `agentdescent` command line: the verbs, what they show, and the offline demo's run.

`main` is imported when first used (`agentdescent._exports`): a process that imports
`agentdescent.cli.demo` for the reference domain's old names does not import every verb, the run
service and rich with them.
"""

# ruff: noqa: F401 - the import under TYPE_CHECKING is there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import lazy

if TYPE_CHECKING:
    from agentdescent.cli.main import main

_WHERE = {"main": "agentdescent.cli.main"}
__all__ = ["main"]
__getattr__, __dir__ = lazy(__name__, _WHERE)
