"""The optimizer step: admit → rebase → resolve → accept → commit.

Diffs do not add like gradients, so the step is not an average. Each stage is a small function in
a module of its own; `Aggregator.step` threads a batch of diffs through them and gives every diff
exactly one `Outcome`. What it leaves out: producing diffs (workers), scoring (the scorer it is
handed) and storage (the `Ledger`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent.artifacts.state import State, apply
from agentdescent.errors import HeadMoved, LedgerError, UserError
from agentdescent.governance import Governance
from agentdescent.ledger import Ledger
from agentdescent.step.accept import Acceptance, accept
from agentdescent.step.admit import admit
from agentdescent.step.changes import Approve, Change, Scorer
from agentdescent.step.commit import AlreadyLanded, CarriedUnreadable, commit
from agentdescent.step.folders import Folders
from agentdescent.step.policies import StepPolicies
from agentdescent.step.rebase import rebase
from agentdescent.step.resolve import resolve
from agentdescent.step.staleness import StaleDecision
from agentdescent.step.stats import mean_reward
from agentdescent.step.trial import Judge, unique
from agentdescent.types import Diff, Edit, Outcome, OutcomeKind, Task


@dataclass(frozen=True, kw_only=True)
class StepReport:
    step: int
    base_version: int
    version: int | None  # the new dev version, or None when nothing landed
    outcomes: list[Outcome]
    staleness: dict[str, int] = field(default_factory=dict)  # diff id -> versions its base is behind head
    decisions: dict[str, StaleDecision] = field(default_factory=dict)  # diff id -> the staleness policy's word
    eta: dict[str, float] = field(default_factory=dict)  # diff id -> the weight of its evidence in the test
    head_reward: float | None = None  # mean on the committed candidate's acceptance set
    candidate_reward: float | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _outcome(diff: Diff, kind: OutcomeKind, reason: str, step: int, version: int | None = None) -> Outcome:
    return Outcome(diff_id=diff.id, kind=kind, reason=reason, version=version, step=step, author=diff.author)


@dataclass(kw_only=True)
class Aggregator:
    """Owns the write side of one artifact in one ledger. Call `step` from one thread."""

    ledger: Ledger
    artifact_id: str
    governance: Governance
    policies: StepPolicies
    train: Sequence[Task]
    score: Scorer
    lag_budget: int | None = None
    oracle: Sequence[Task] = ()  # the tasks a gated (L1) change must leave no worse: the held-out set
    approve: Approve | None = None  # asked about a gated change that passed the test and the oracle
    known: Callable[[State], Mapping[str, float]] | None = None  # a state's rewards already measured (the cache)
    again: Scorer | None = None  # draws past the cache, where rewards turn out to be samples (None: never)
    drawn: Callable[[], tuple[int, int]] = lambda: (0, 0)  # the run's draws again so far, and how many differed
    draws: Callable[[State, str], list[float]] = lambda state, task_id: []  # a state's rewards on a task, first first
    errors: Callable[[State, Sequence[Task]], list[str]] = lambda state, tasks: []  # its first rollouts' errors there
    # Diffs that came unmeasured (the step measures their evidence in its first wave) and that the
    # conflict policy must rank are measured before it does; a worker's verified ones need nothing.
    verify_contested: bool = False
    # The L1 changes an approver declined (`gate.digest` -> why): proposed again, each is refused
    # unjudged and unasked. A checkpoint keeps it, so a resumed run does not ask again either.
    declined: dict[str, str] = field(default_factory=dict)
    _evidence: list[int] = field(default_factory=lambda: [0, 0], init=False)  # the run's components: held, failed

    def step(self, diffs: Sequence[Diff], step: int, *, sample: Sequence[Task]) -> StepReport:
        """Aggregate one batch of diffs. `sample` is head version's probe order, drawn by the caller
        once per version (`AcceptancePolicy.sample`)."""
        t0 = time.perf_counter()
        head = self.ledger.head()
        head_state = self.ledger.snapshot(self.artifact_id, head)
        verdicts: dict[str, tuple[OutcomeKind, str]] = {}
        staleness = {d.id: head - d.base_version for d in diffs}
        decisions = {d.id: self.policies.staleness.decide(s, self.lag_budget) for d, s in zip(diffs, staleness.values())}
        eta = {i: self.policies.staleness.weight(staleness[i]) if decisions[i] == "discounted" else 1.0 for i in decisions}
        changes = self._admit_and_rebase(diffs, staleness, decisions, eta, head_state, verdicts)
        resolution = resolve(changes, head_state, self.policies,
                             verify=functools.partial(self._verified, head_state) if self.verify_contested else None,
                             unreadable=lambda key, text: self.governance.broken(key, head_state.get(key), text))
        verdicts.update(resolution.unplaced)
        t1 = time.perf_counter()
        components = resolution.components
        held, failed = self._evidence  # a lone diff's probes ride with its evidence once most diffs hold
        rides = (1 + held) / (2 + held + failed) >= self.policies.acceptance.ride
        acceptance = accept(components, head_state, sample, self._judge, lone_rides=rides)
        self._evidence = [held + acceptance.held, failed + acceptance.failed]
        verdicts.update((diff_id, (acceptance.kinds.get(diff_id, "rejected_by_test"), why))
                        for diff_id, why in acceptance.rejected.items())
        t2 = time.perf_counter()
        version = self._commit(head, head_state, acceptance, step, verdicts, resolution.lost)
        t3 = time.perf_counter()
        outcomes = [_outcome(d, *verdicts[d.id], step, version if verdicts[d.id][0] in ("committed", "fused") else None) for d in diffs]
        return StepReport(
            step=step, base_version=head, version=version, outcomes=outcomes, staleness=staleness,
            decisions=decisions, eta=eta,
            head_reward=acceptance.head_reward, candidate_reward=acceptance.candidate_reward,
            timings={"prepare": t1 - t0, "accept": t2 - t1, "commit": t3 - t2},
        )

    @functools.cached_property
    def _judge(self) -> Judge:
        return Judge(score=self.score, policies=self.policies, governance=self.governance,
                     train={t.id: t for t in self.train}, oracle=self.oracle, approve=self.approve, declined=self.declined,
                     known=self.known or (lambda state: {}), again=self.again, drawn=self.drawn,
                     draws=self.draws, errors=self.errors)

    def _verified(self, head_state: State, changes: Sequence[Change]) -> dict[str, Change]:
        """Each change's self-verification, done here: its patched state against head on the
        failures it was made from, all in one wave (the test's evidence stage then finds them in
        the cache); by diff id, each with its card filled in."""
        train = self._judge.train
        measured = {}
        tasks = [unique([train[t] for t in c.diff.evidence.task_ids if t in train]) for c in changes]
        rows = self.score([job for c, ts in zip(changes, tasks) for job in ((head_state, ts), (apply(head_state, c.after), ts))])
        for c, ts, before, after in zip(changes, tasks, rows[::2], rows[1::2]):
            diff = c.diff.verified([t.id for t in ts], mean_reward(before), mean_reward(after))
            measured[c.diff.id] = dataclasses.replace(c, diff=diff)
        return measured

    def _admit_and_rebase(
        self, diffs: Sequence[Diff], staleness_of: Mapping[str, int], decisions: Mapping[str, StaleDecision],
        eta: Mapping[str, float], head_state: State, verdicts: dict[str, tuple[OutcomeKind, str]],
    ) -> list[Change]:
        changes = []
        head_folders = Folders(head_state)
        for diff in diffs:
            refusal = admit(diff, self.artifact_id, self.governance)
            staleness = staleness_of[diff.id]
            if refusal is None and decisions[diff.id] == "dropped":
                refusal = ("dropped_stale", f"{staleness} versions behind head; the lag budget is {self.lag_budget}")
            if refusal is None:
                try:
                    base_state = head_state if staleness == 0 else self.ledger.snapshot(self.artifact_id, diff.base_version)
                except LedgerError as exc:
                    refusal = ("error", f"could not read its base version {diff.base_version}: {exc}")
                else:
                    rebased = self._rebased(diff, staleness, head_state, base_state, head_folders)
                    if isinstance(rebased, Change):
                        changes.append(dataclasses.replace(rebased, decision=decisions[diff.id], eta=eta[diff.id]))
                        continue
                    refusal = rebased
            assert refusal is not None  # a diff not refused went on as a change
            verdicts[diff.id] = refusal
        return changes

    def _rebased(
        self, diff: Diff, staleness: int, head_state: State, base_state: State, head_folders: Folders,
    ) -> Change | tuple[OutcomeKind, str]:
        """`rebase`, with the texts it merged onto head's checked as admission checked the diff's
        against its base's: a file that parses at head still parses."""
        rebased = rebase(diff, staleness, head_state, base_state, self.policies, head_folders)
        if not isinstance(rebased, Change) or staleness == 0:
            return rebased
        broken = self.governance.unreadable([Edit(key=k, before=head_state.get(k), after=t) for k, t in rebased.after.items()])
        return ("invalid", f"merged onto head (version {diff.base_version + staleness}), {broken}") if broken else rebased

    def _commit(
        self, head: int, head_state: State, acceptance: Acceptance, step: int,
        verdicts: dict[str, tuple[OutcomeKind, str]], lost: dict[str, list[str]],
    ) -> int | None:
        if not acceptance.accepted:
            return None
        refused: tuple[OutcomeKind, str] | None = None
        try:
            version = commit(self.ledger, self.artifact_id, head, head_state, acceptance, step, self.policies,
                             self.governance.unreadable)
        except CarriedUnreadable as exc:
            refused = ("conflict_lost", str(exc))
        except HeadMoved as exc:
            refused = ("conflict_lost", f"another writer moved dev and the change no longer applies ({exc})")
        except AlreadyLanded as exc:
            refused = ("duplicate", str(exc))
        except UserError as exc:  # the ledger refused this candidate: its diffs fail, not the run (a LedgerError is
            # the ledger refusing every commit, a lock a killed git left: the run stops instead of paying on)
            refused = ("error", f"the ledger refused the change: {exc}")
        if refused:
            for comp in acceptance.accepted:
                for c in comp.changes:
                    verdicts[c.diff.id] = refused
            return None
        for comp in acceptance.accepted:
            for c in comp.changes:
                fused = comp.fused_keys & set(c.after)
                kind: OutcomeKind = "fused" if fused else "committed"
                how = f"merged with other diffs on {', '.join(sorted(fused))}; " if fused else ""
                lost_keys = f"; its edit of {', '.join(lost[c.diff.id])} lost to better evidence" if c.diff.id in lost else ""
                landed = f"landed in version {version} ({acceptance.reason})"
                approved = f"; approved as L1 change {acceptance.approved[c.diff.id]}" if c.diff.id in acceptance.approved else ""
                verdicts[c.diff.id] = (kind, f"{how}{landed}{approved}{c.note}{lost_keys}")
        return version
