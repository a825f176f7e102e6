"""When a run stops early: each rule a small object that reads the run's progress and says why.

`rounds` is not a rule here: the loop runs at most that many. `evolve` makes `TargetReward` and
`Patience` from its keywords, adds the run's allowance (`calls.budget`: its `Budget` as caps,
which stops the rounds between them once what they may spend is spent, and keeps any call from
starting past it inside one), and the rules of `stop=[...]`, which may be any `StopRule` of the
caller's.

    class GoodEnough:           # held-out 0.9 is enough once 200 calls are spent
        def __call__(self, progress, usage):
            return "good enough" if progress.best >= 0.9 and usage.calls >= 200 else None
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentdescent.agents.limits import cause
from agentdescent.engine.calls.units import UNUSABLE
from agentdescent.engine.ctrl_c import CTRL_C
from agentdescent.errors import AgentDescentError, Cancelled, LedgerError, UserError
from agentdescent.quoting import bounded, described, quoted
from agentdescent.types import Outcome
from agentdescent.usage import Usage


@dataclass(kw_only=True)
class Progress:
    """What the run has reached so far; the loop keeps it, the stop rules read it."""

    best: float = 0.0  # the held-out reward of `stable`
    since_gain: int = 0  # rounds since `stable` last gained


class StopRule(Protocol):
    """Asked before each round. A rule whose `after_measuring` is True is asked again once `dev`'s
    last commits are measured on the held-out set (patience must not end a run a commit would have
    renewed). A rule with an `on_cancel(callback)` method (a `CancelToken`) can end the run inside a
    round: the run registers there what abandons its calls in flight, and calls what `on_cancel`
    returns (when it is callable) once the run is over."""

    def __call__(self, progress: Progress, usage: Usage, /) -> str | None:
        """Why the run stops before its next round, or None; raising `Cancelled` ends it as cancelled.
        Both are passed by position: a rule may name them as it likes."""


@dataclass(frozen=True)
class TargetReward:
    target: float

    def __call__(self, progress: Progress, usage: Usage) -> str | None:
        if progress.best >= self.target:
            return f"reached target reward {self.target} (held-out {progress.best:.3f})"
        return None


@dataclass(frozen=True)
class Patience:
    rounds: int
    after_measuring = True

    def __call__(self, progress: Progress, usage: Usage) -> str | None:
        if progress.since_gain >= self.rounds:
            return f"no held-out gain in {progress.since_gain} rounds (patience {self.rounds})"
        return None


def stop_rules(*, target_reward: float | None, patience: int | None, budget: StopRule) -> list[StopRule]:
    """The rules `evolve`'s arguments ask for, in the order their reasons are given; `budget`: the
    run's allowance."""
    rules: list[StopRule] = []
    if target_reward is not None:
        rules.append(TargetReward(target_reward))
    if patience is not None:
        rules.append(Patience(patience))
    return [*rules, budget]


def stop_reason(rules: Sequence[StopRule], progress: Progress, usage: Usage) -> str | None:
    """The first rule's reason to stop, or None to go on. A rule of the caller's that raises, or
    answers with anything but a reason (a str) or None, is a `UserError` naming it: the run stops
    with its result, not with the rule's traceback."""
    for rule in rules:
        try:
            reason = rule(progress, usage)
        except AgentDescentError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the caller's rule: any error of theirs
            raise UserError(f"the stop rule {_named(rule)} raised {described(exc)}") from None
        if reason is not None and not isinstance(reason, str):
            raise UserError(f"the stop rule {_named(rule)} returned {str(reason)[:40]!r} ({type(reason).__name__}); "
                            "a stop rule returns why to stop (a str) or None to go on")
        if reason:
            return reason
    return None


def _named(rule: object) -> str:
    return getattr(rule, "__qualname__", None) or type(rule).__name__


class NothingWorked(UserError):
    """Every rollout of a stretch of the run (a round, a held-out measurement) failed with an error
    (the agent or the scorer raised each time), or every reflection did: the run stops as failed,
    naming the first error, instead of spending its budget on calls that teach nothing or reporting
    their zeros as a reward."""


FEWEST_LATER = 4  # a later round that ran fewer rollouts says too little to stop a run that has worked
FEWEST_UNREADABLE = 4  # reflections whose replies could not be read, all a round had, that stop a run
# What a run stopped for a fix can do once it is made: `evolve(..., store=...)` resumes with what it is
# given again, while `agentdescent resume` runs the spec stored with the run and reads no edit of it.
AFTER_A_FIX = ("then resume the run (evolve(..., store=...) given what you fixed) or start it again; a run of a spec "
               "resumes with the spec stored with it, so after a fix to the spec start a new run: agentdescent evolve SPEC")
# Later rounds whose every reflection, or every rollout (of changes under test), failed, with none since that
# did not (a round that ran none is neither), that stop a run though each error may pass or be a change's own
FAILING_ROUNDS = 3


def _for_good(error: str | None) -> bool:
    """Whether `error` is one no change under test and no task causes: a key or a model refused (a
    lasting `Cause` that is not `sent`)."""
    found = cause(error)
    return found is not None and found.lasting and not found.sent


def nothing_worked(stretch: str, failed: int, error: str | None, which: str = "first", *, among: str = "") -> NothingWorked:
    """The error that stops a run whose `failed` rollouts of `stretch` all failed, naming the
    `which` (first or last) of their errors, and the fix its cause calls for (`limits.cause`)."""
    return NothingWorked(f"every rollout of {stretch} failed ({failed} of {failed}){among}, so the run cannot learn "
                         f"anything; the {which} error: {error or 'not kept'}. "
                         f"{advice(error, 'Fix the agent or the scorer (plan checks the scorer)')}, {AFTER_A_FIX}")


def advice(error: str | None, otherwise: str) -> str:
    """What to fix, as a sentence: what the cause of `error` calls for, else `otherwise`."""
    found = cause(error)
    return otherwise if found is None else found.fix[:1].upper() + found.fix[1:]


@dataclass
class FailureWatch:
    """Counts the rollouts that ran (and how many of them failed with an error) from `watch` on;
    `check` raises `NothingWorked` when at least `fewest` ran and every one failed. Rollouts
    served from the cache or a journal are not counted: only what ran says how the agent and the
    scorer behave now. A rollout that ran and scored 0 is no failure, and a stretch whose failures
    are all of one task, in a run some rollout of which has passed, is that task's fault: it stops
    nothing, and the first such task is told (`told`: its rollouts are run again each round, as failed
    ones are never cached; the errors of others are in `usage.errors`). Past the first round of a
    run, a round whose failed rollouts were all of changes under test stops it only when their
    error is no change's doing, or after `FAILING_ROUNDS` such rounds (`check_round`); reflections
    are watched alike (`check_reflections`). A held-out measurement in the background is no part of a
    round: its rollouts are left out of the round's, and its own check names it (`validation`)."""

    rollouts: int = 0
    failures: int = 0
    held_out: tuple[int, int] = (0, 0)  # of those, the held-out measurements' rollouts and failures
    said: int = 0  # the errors usage kept before the stretch began
    committed: int = 0  # the rollouts of committed versions (minibatches: `train`) that ran before it
    # The later rounds since a rollout passed (since a reflection did not fail): (round, how many ran,
    # its first error) of each round in which some ran and all failed
    failing: list[tuple[int, int, tuple[str | None, str]]] = field(default_factory=list)
    refusing: list[tuple[int, int, str]] = field(default_factory=list)
    by_task: dict[str, int] = field(default_factory=dict)  # `Usage.failed_tasks` when the stretch began
    told: bool = False  # whether a warning has named a task failing alone

    def watch(self, usage: Usage) -> None:
        self.rollouts, self.failures, validate, validate_failures, self.committed = usage.counts(
            "rollouts", "failures", "validate", "validate_failures", "train")
        self.held_out, self.said = (validate, validate_failures), len(usage.errors)
        self.by_task = usage.failures_by_task()

    def check(self, usage: Usage, stretch: str, fewest: int = 1, *, held_out: bool = True) -> str | None:
        """`NothingWorked` when at least `fewest` rollouts of `stretch` ran and every one failed;
        the warning to give when they were all of one task (`one_task`), else None."""
        ran, failed = self._since(usage, held_out=held_out)
        if ran < fewest or failed < ran:
            return None
        error, which = self._first(usage)
        task = None if _for_good(error) else self.one_task(usage)
        if task is not None:
            return self._tell(task, stretch, failed, error, which)
        raise nothing_worked(stretch, failed, error, which)

    def one_task(self, usage: Usage) -> str | None:
        """The task every rollout that failed since `watch` was of (held-out ones aside), when they
        were all one task's and some rollout of the run has passed; None otherwise."""
        now, (rollouts, failures) = usage.failures_by_task(), usage.counts("rollouts", "failures")
        grew = [task for task, n in now.items() if n > self.by_task.get(task, 0)]
        return grew[0] if len(grew) == 1 and rollouts > failures else None

    def _tell(self, task: str, stretch: str, failed: int, error: str | None, which: str) -> str | None:
        if self.told:
            return None
        self.told = True
        return (f"every rollout of {stretch} failed ({failed} of {failed}), all of them on task {quoted(task, 80)}, while other "
                f"tasks' have passed: the run goes on, running that task again each round (a rollout that failed "
                f"is not kept); the {which} error: {error or 'not kept'}. {advice(error, 'Fix the agent or the task')} "
                "(another task failing alone is not told again: result.usage.errors holds the first errors)")

    def _since(self, usage: Usage, *, held_out: bool) -> tuple[int, int]:
        """The rollouts that ran since `watch` and how many failed; without the held-out measurements'
        unless `held_out`."""
        rollouts, failures, validate, validate_failures = usage.counts("rollouts", "failures", "validate", "validate_failures")
        ran, failed = rollouts - self.rollouts, failures - self.failures
        if held_out:
            return ran, failed
        return ran - (validate - self.held_out[0]), failed - (validate_failures - self.held_out[1])

    def _first(self, usage: Usage) -> tuple[str | None, str]:
        """The first error since `watch`, or the newest when usage kept none of them (it keeps the first few)."""
        errors = usage.errors[self.said:]
        return (errors[0], "first") if errors else (usage.last_error, "last")

    def check_round(self, usage: Usage, round_: int, first: int) -> str | None:
        """`check` for a round of a run (or a resume) that began at round `first`. Past that one,
        a round that ran at least `FEWEST_LATER` rollouts, every one failed, stops the run when
        the error is one no change under test causes (a key or a model refused: a lasting `Cause`
        that is not `sent`); else, unless they were all one task's (a warning, as `check` gives),
        when rollouts of the committed artifact (its minibatches) were among them, or when it is
        the `FAILING_ROUNDS`th such round since a rollout last passed. Otherwise the rollouts were
        all of changes under test, each refused with its error, and the run goes on."""
        stretch = self.named(round_, first)
        if round_ == first:
            return self.check(usage, stretch, held_out=False)
        ran, failed = self._since(usage, held_out=False)
        if failed < ran:
            self.failing = []
        if ran == 0 or failed < ran:
            return None
        error, which = self._first(usage)
        if _for_good(error):  # however few ran, and whichever task: no task's fault
            if ran >= FEWEST_LATER:
                raise nothing_worked(stretch, failed, error, which)
        elif (task := self.one_task(usage)) is not None:
            return self._tell(task, stretch, failed, error, which)
        self.failing.append((round_, ran, (error, which)))
        if ran < FEWEST_LATER:
            return None
        if usage.train > self.committed:
            raise nothing_worked(stretch, failed, error, which, among=", the committed artifact's among them")
        if sum(n >= FEWEST_LATER for _, n, _ in self.failing) >= FAILING_ROUNDS:
            (start, _, said), n = self.failing[0], sum(n for _, n, _ in self.failing)
            raise nothing_worked(f"rounds {start + 1} to {round_ + 1}", n, *said, among=", all of changes under test")
        return None

    @staticmethod
    def named(round_: int, first: int) -> str:
        """A round as the stop message names it: named(0, 0) == "the first round" """
        if round_ != first:
            return f"round {round_ + 1}"
        return "the first round" if first == 0 else f"round {first + 1}, the first after the resume"

    def check_reflections(self, outcomes: Sequence[Outcome], round_: int, first: int) -> None:
        """`NothingWorked` when every reflection of the round failed: `propose` raised or ran out
        of time (a wrong key, model or signature), or raised `InvalidProposal` (a model reflector's
        reply it could not read: a refusal, another format than its prompt asks for, a reply cut
        off), so no diff can come: at once in the first round of a run (or a resume; unreadable
        replies only when the round had at least `FEWEST_UNREADABLE`, fewer may be a noisy model's)
        and when the error will not pass by itself (a key refused, a prompt too long for the
        reflector's model: a lasting `Cause`), else at the `FAILING_ROUNDS`th such round since a
        reflection last did not fail."""
        failed = [o for o in outcomes if _raised(o)]
        if len(failed) < len(outcomes):
            self.refusing = []
        if not failed or len(failed) < len(outcomes):
            return
        self.refusing.append((round_, len(failed), failed[0].reason))
        found = cause(failed[0].reason)
        unreadable = any(o.kind == "invalid" for o in failed)
        if (round_ == first and not (unreadable and len(failed) < FEWEST_UNREADABLE)) or (found is not None and found.lasting):
            stretch, n, reason = self.named(round_, first), len(failed), failed[0].reason
        elif len(self.refusing) >= FAILING_ROUNDS:
            (start, _, reason), n = self.refusing[0], sum(n for _, n, _ in self.refusing)
            stretch = f"rounds {start + 1} to {round_ + 1}"
        else:
            return
        kinds = {o.kind for o in failed}
        fix = "; ".join([*(["its key, its model, its arguments"] if "error" in kinds else []),
                         *(["a model that replies in the form its prompt asks, with room in max_tokens for a whole reply"]
                           if "invalid" in kinds else [])])
        raise NothingWorked(f"every reflection of {stretch} failed ({n} of {n}), so the run cannot change anything; "
                            f"the first: {reason}. {advice(reason, f'Fix the reflector (propose: {fix})')}, {AFTER_A_FIX}")


def _raised(outcome: Outcome) -> bool:
    """Whether a reflection's outcome is `propose` failing: it raised, ran out of time, or raised
    InvalidProposal (a proposal the strategy refused is no such failure)."""
    if outcome.kind == "error":
        return outcome.reason.startswith("propose ")
    return outcome.kind == "invalid" and outcome.reason.startswith(UNUSABLE)


def unwritable(exc: OSError | LedgerError) -> tuple[str, str]:
    """Why a run stops when its files or its ledger cannot be written, and its error: the disk (full,
    read-only), or git refusing every commit (a lock file a killed git left, the ledger's permissions)."""
    if isinstance(exc, LedgerError):
        return (f"stopped: the ledger refused a commit ({exc}); every commit so far is kept: fix that, then resume",
                f"the ledger refused a commit: {exc}")
    said = exc.strerror or str(exc)
    return (f"stopped: cannot write the run's files ({said}); free some space, then run again",
            f"cannot write the run's files: {said}")


def broken(exc: UserError) -> tuple[str, str]:
    """Why a run stops when a contract broke mid-run, and its error. The text is bounded (redacted,
    a lone surrogate escaped): the caller's own code may have raised it, and it is kept in the
    checkpoint and the run's status."""
    said = bounded(str(exc))
    return f"stopped by an error: {said}", said


STOPS = (UserError, KeyboardInterrupt, Cancelled, OSError, LedgerError)  # what ends a run mid-way, as `ended` tells it


def ended(exc: BaseException) -> tuple[str, str, bool]:
    """(reason, error, whether to warn when every rollout failed) of a run one of `STOPS` ended:
    a broken contract (or a stretch in which nothing worked), Ctrl-C, a cancel, or a disk or
    ledger that refuses writes. The run keeps what it committed."""
    if isinstance(exc, UserError):
        return (*broken(exc), not isinstance(exc, NothingWorked))
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)", "interrupted", True
    if isinstance(exc, Cancelled):
        return (*cancelled(exc), True)
    if isinstance(exc, (OSError, LedgerError)):
        return (*unwritable(exc), True)
    raise exc


def unmeasured(version: int, stable: int, ledger: str, error: str | None) -> str:
    """What a run that committed `version` and stopped before measuring it tells: the result is
    `stable`, and where the unmeasured version is."""
    why = "the budget ran out first" if error is None else "the run stopped first"
    return (f"version {version} was committed but never measured on the held-out tasks ({why}), so the result is "
            f"version {stable}, the best measured: version {version} is the head of the ledger's dev branch "
            f"(git -C {shlex.quote(ledger)} log -p dev shows its commits), and a run on that ledger "
            f"(evolve(..., store=...)) measures it before its first round")


def cancelled(exc: Cancelled, when: str = "") -> tuple[str, str]:
    """(reason, error) of a run a cancel stopped; a Ctrl-C's (`ctrl_c`) is an interrupt."""
    if str(exc) == CTRL_C:
        return f"{CTRL_C}{when}", "interrupted"
    return ("cancelled" if str(exc) in ("", "cancelled") else f"cancelled ({exc})"), "cancelled"


def all_failed(usage: Usage, warnings: Sequence[str]) -> str | None:
    """The warning for a run every rollout of which has failed so far (it can learn nothing), unless
    `warnings` already hold it."""
    rollouts, failures = usage.counts("rollouts", "failures")
    if not rollouts or failures < rollouts or any(w.startswith("every rollout") for w in warnings):
        return None
    first = usage.errors[0] if usage.errors else "unknown"
    return (f"every rollout so far failed ({failures} of {rollouts}), so nothing can be learned; the "
            f"first error: {first}")
