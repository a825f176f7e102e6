"""The exceptions AgentDescent raises.

    AgentDescentError            anything this package raises on purpose
    ├── UserError                bad input or configuration: the message names the problem and the fix
    ├── AgentError               a model or agent call failed after its retries: what it answered
    ├── Cancelled                the run was cancelled (`CancelToken.cancel`) while this waited
    └── LedgerError              the git ledger could not be read or written
        └── HeadMoved            a compare-and-swap lost: another writer moved `dev` first

A single failed rollout or proposal is not an exception: it becomes an `Outcome` with a reason.
"""

from __future__ import annotations


class AgentDescentError(Exception):
    """Base class of every error this package raises on purpose."""


class UserError(AgentDescentError, ValueError):
    """The caller passed something unusable; the message says how to fix it."""


class AgentError(AgentDescentError):
    """A model or CLI agent failed: the server's answer, the exit code or the stderr tail is in the
    message. Inside `evolve` it is a failed rollout or proposal, not the end of the run."""


class Cancelled(AgentDescentError):
    """The run was cancelled: work still in flight fails with this, and `evolve` returns what was
    committed, with `result.error` set."""


class LedgerError(AgentDescentError):
    """The ledger repository is missing, corrupt, or a git command failed."""


class HeadMoved(LedgerError):
    """`dev` is no longer at the version the writer based its commit on."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"dev moved: expected version {expected}, found {actual}; rebase and retry")
        self.expected = expected
        self.actual = actual
