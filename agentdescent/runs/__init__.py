"""Runs as a service: run specs, the run store, detached resumable runs, and the host as a worker.

The CLI verbs and the MCP server are thin layers over `Service` (start, follow, stop, resume) and
`review` (show, accept, reject); `doctor` says what this machine has.

The names below are imported when first used (`agentdescent._exports`): a module that imports one
record of this package (`runs.status`, `runs.hostwork`) does not import the service and all it runs on.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import by_name, lazy

if TYPE_CHECKING:  # the same names, read by type checkers
    from agentdescent.runs.service import Service
    from agentdescent.runs.spec import RunSpec, SpecError, read_spec
    from agentdescent.runs.store import RunStore, home

_WHERE = by_name({
    "agentdescent.runs.service": "Service",
    "agentdescent.runs.spec": "RunSpec SpecError read_spec",
    "agentdescent.runs.store": "RunStore home",
})
__getattr__, __dir__ = lazy(__name__, _WHERE)

__all__ = ["RunSpec", "RunStore", "Service", "SpecError", "home", "read_spec"]
