"""Runs as a service: run specs, the run store, detached resumable runs, and the host as a worker.

The CLI verbs and the MCP server are thin layers over `Service` (start, follow, stop, resume) and
`review` (show, accept, reject); `doctor` says what this machine has.
"""

from agentdescent.runs.service import Service
from agentdescent.runs.spec import RunSpec, SpecError, read_spec
from agentdescent.runs.store import RunStore, home

__all__ = ["RunSpec", "RunStore", "Service", "SpecError", "home", "read_spec"]
