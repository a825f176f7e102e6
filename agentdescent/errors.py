"""The exceptions AgentDescent raises, one family.

    AgentDescentError            anything this package raises on purpose
    ├── UserError                bad input or configuration: the message names the problem and the fix
    │   └── OutOfRange           ... for a setting outside the range its reader can act on (the field and range named)
    ├── InvalidProposal          a proposal a strategy cannot turn into edits (a `propose` may raise it)
    ├── AgentError               a model or agent call failed after its retries: what it answered
    │   └── BadReply             a provider's 2xx body held no answer (retried once)
    ├── Killed                   a helper program was killed, with its process group, before it ended
    │   ├── TimedOut             ... for outliving its timeout
    │   └── OutputTooLarge       ... for writing more than its output cap
    ├── Stopping                 a helper program asked to start while this process stops (also an `OSError`)
    ├── BudgetSpent              a budget ran out: nothing more may start (the run ends, keeping its commits)
    ├── Cancelled                the run was cancelled (`CancelToken.cancel`) while this waited
    └── LedgerError              the git ledger could not be read or written
        ├── LedgerDamaged        ... for what something else did to it: a ref that names no commit, an object gone
        └── HeadMoved            a compare-and-swap lost: another writer moved `dev` first

A single failed rollout or proposal is not an exception: it becomes an `Outcome` with a reason.
`UserError` and `InvalidProposal` are also `ValueError`s.
"""

from __future__ import annotations

import shlex


class AgentDescentError(Exception):
    """Base class of every error this package raises on purpose."""


class UserError(AgentDescentError, ValueError):
    """The caller passed something unusable; the message says how to fix it."""


class OutOfRange(UserError):
    """A setting of an object (a policy) outside the range the code that reads it can act on.
    `field` is its name on the object, as a spec names it under the object's place
    (`policies.proposal.scouts` is `scouts` of `WorstFirst`); `allowed` says the range."""

    def __init__(self, owner: str, field: str, value: object, allowed: str) -> None:
        super().__init__(f"{owner}({field}={value!r}): {allowed}")
        self.owner = owner
        self.field = field
        self.value = value
        self.allowed = allowed

    def __reduce__(self) -> tuple:  # its arguments are not its message, so it travels between processes by them
        return (type(self), (self.owner, self.field, self.value, self.allowed))


class InvalidProposal(AgentDescentError, ValueError):
    """A proposal the strategy cannot turn into edits; recorded as an `invalid` outcome. A
    `propose` may raise it for a reply it cannot use."""


class AgentError(AgentDescentError):
    """A model or CLI agent failed: the server's answer, the exit code or the stderr tail is in the
    message. Inside `evolve` it is a failed rollout or proposal, not the end of the run."""


class BadReply(AgentError):
    """Raised by a provider's `_parse` when a 2xx body is not the answer it expects."""


class Killed(AgentDescentError):
    """A helper program (a CLI agent, a grader) was killed, with its whole process group, before it
    ended by itself. `stderr` is what it wrote there (its last bytes)."""

    def __init__(self, message: str, stderr: str) -> None:
        super().__init__(message)
        self.stderr = stderr


class TimedOut(Killed):
    """The program outlived its timeout."""

    def __init__(self, timeout: float, stderr: str) -> None:
        super().__init__(f"timed out after {timeout:g} s", stderr)


class OutputTooLarge(Killed):
    """The program wrote more than `limit` bytes to stdout."""

    def __init__(self, limit: int, stderr: str) -> None:
        super().__init__(f"wrote more than {limit:,} bytes to stdout and was killed", stderr)
        self.limit = limit


class Stopping(AgentDescentError, OSError):
    """A helper program asked to start after `process.kill_all`: this process is stopping (a
    cancelled run), so it starts none; callers see it as the program failing to start."""


class BudgetSpent(AgentDescentError):
    """A budget ran out: nothing more may start. The message says which and how much was spent."""


class Cancelled(AgentDescentError):
    """The run was cancelled: work still in flight fails with this, and `evolve` returns what was
    committed, with `result.error` set."""


class LedgerError(AgentDescentError):
    """The ledger repository is missing, corrupt, or a git command failed."""


class LedgerDamaged(LedgerError):
    """The ledger holds what AgentDescent never writes: `what` names it (a ref, an object) and
    `ref` is the ref it is about, if one is. Going on from it would build on what is lost."""

    def __init__(self, path: object, what: str, *, ref: str | None = None) -> None:
        super().__init__(f"the ledger {path} is damaged ({what}): something other than AgentDescent changed it; put "
                         f"back what it lost (git -C {shlex.quote(str(path))} fsck names it), or give store= a new "
                         "folder to start anew")
        self.what = what
        self.ref = ref


class HeadMoved(LedgerError):
    """`dev` is no longer at the version the writer based its commit on."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"dev moved: expected version {expected}, found {actual}; rebase and retry")
        self.expected = expected
        self.actual = actual
