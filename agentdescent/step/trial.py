"""One step's test: what it judges candidates with, and what it has measured of head so far.

`Judge` holds the scorer, the policies and governance, the train tasks, the evaluation cache and,
for gated (L1) changes, the oracle set and the approver. `Trial` is one step's working state:
head's rewards, measured once and shared by every candidate the step scores, the probe order, and
the rejections (and L1 approvals) so far; and, where rewards are samples (`noisy`), the draws again a decision
hinges on. What it leaves out: the order of the test (`accept`) and the L1 bar (`gate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace

from agentdescent.artifacts.state import State
from agentdescent.governance import Governance
from agentdescent.step.changes import Approve, Component, Scorer
from agentdescent.step.policies import StepPolicies, Verdict, rewards_noisy
from agentdescent.step.stats import mean_reward
from agentdescent.types import OutcomeKind, Task


@dataclass(frozen=True, kw_only=True)
class Judge:
    """What the step judges candidates with: the scorer, the policies and governance, the train tasks
    by id, what is already known of a state's rewards (the evaluation cache), and the oracle set
    and approver for gated (L1) changes, with what the approver declined so far in the run."""

    score: Scorer
    policies: StepPolicies
    governance: Governance
    train: Mapping[str, Task]
    known: Callable[[State], Mapping[str, float]] = lambda state: {}
    oracle: Sequence[Task] = ()
    approve: Approve | None = None
    declined: MutableMapping[str, str] = field(default_factory=dict)  # a change an approver declined (`gate.digest`) -> why
    again: Scorer | None = None  # draws past the cache, each a new sample (None: every reward is taken as exact)
    drawn: Callable[[], tuple[int, int]] = lambda: (0, 0)  # the run's draws again so far, and how many differed
    draws: Callable[[State, str], list[float]] = lambda state, task_id: []  # a state's rewards on a task, first first
    errors: Callable[[State, Sequence[Task]], list[str]] = lambda state, tasks: []  # its first rollouts' errors there


class Trial:
    """One step's test: head's rewards measured once and shared by every candidate."""

    def __init__(self, head_state: State, probes: Sequence[Task], judge: Judge) -> None:
        self.head_state, self.probes, self.judge = head_state, list(probes), judge
        self.policy = judge.policies.acceptance
        self.head: dict[str, float] = dict(judge.known(head_state))
        self.rejected: dict[str, str] = {}
        self.kinds: dict[str, OutcomeKind] = {}  # rejected diff id -> its outcome kind where no test refused it
        self.approved: dict[str, str] = {}  # diff id -> the L1 change (`GatedChange.id`) an approver approved it in
        self.answers: dict[tuple[tuple[Component, ...], str], float] = {}  # (a subset of parts, task id) -> its reward
        self.charged: dict[tuple[Component, ...], list[str]] = {}  # a culprit group -> the tasks it broke so far
        self.weights: dict[str, float] = {}  # evidence task id -> its weight in the test (η of a discounted diff)
        # a failure a diff was made from -> head's draws on it since the one that chose it (no evidence)
        self.since: dict[str, list[float]] = {}

    @property
    def noisy(self) -> bool | None:
        """Whether rewards are samples: True once two draws differed, False when they are exact
        (declared, or `calibration` draws again all agreed), None while the run is finding out."""
        return False if self.judge.again is None else rewards_noisy(self.policy, *self.judge.drawn())

    def score(self, jobs: Sequence[tuple[State, Sequence[Task]]]) -> list[list[float]]:
        """Head on every task of the jobs beside the jobs themselves, in one wave (head is cached)."""
        tasks = list({t.id: t for _, ts in jobs for t in ts}.values())
        head_row, *rows = self.judge.score([(self.head_state, tasks), *jobs])
        self.head.update((t.id, r) for t, r in zip(tasks, head_row) if t.id not in self.since)
        return rows

    def redraw_head(self, tasks: Sequence[Task]) -> None:
        """Head's reward on failures diffs were made from: a failure was chosen for its failing
        draw, so it is the mean of head's draws after the first (one made now where there is none)."""
        fresh = []
        for t in unique(tasks):
            if t.id not in self.since:
                since = self.judge.draws(self.head_state, t.id)[1:]
                if since:
                    self.since[t.id], self.head[t.id] = since, mean_reward(since)
                else:
                    fresh.append(t)
        if fresh and self.judge.again is not None:
            for t, r in zip(fresh, self.judge.again([(self.head_state, fresh)])[0]):
                self.since[t.id], self.head[t.id] = [r], r

    def pairs(self, asks: Sequence[tuple[State, Sequence[Task]]]) -> list[list[tuple[float, float]]]:
        """A fresh draw of each state and of head on each of its tasks, all in one wave: per ask,
        (state's, head's) a task; head's reward on a task becomes the mean of its draws."""
        assert self.judge.again is not None
        rows = self.judge.again([job for state, tasks in asks for job in ((state, tasks), (self.head_state, tasks))])
        means = self.judge.known(self.head_state)
        for (_, tasks), head_row in zip(asks, rows[1::2]):
            for t, h in zip(tasks, head_row):
                if t.id in self.since:
                    self.since[t.id].append(h)
                    self.head[t.id] = mean_reward(self.since[t.id])
                elif t.id in means:
                    self.head[t.id] = means[t.id]
        return [list(zip(row, head_row)) for row, head_row in zip(rows[::2], rows[1::2])]

    def fixing(self, asks: Sequence[tuple[State, Sequence[Task], Sequence[float]]]) -> list[bool]:
        """For each (state, tasks, first): whether `state` fixes one of the failures `tasks` (its
        rewards `first`). With exact rewards: it beats head on one. With samples: on one of them,
        its gain over head summed over fresh pairs of draws (the first pair: `first` and head's
        draw again) reaches the policy's `lead` within `repeats` pairs. A task stops being drawn
        once it cannot, once it is behind, or when two pairs left it no gain: a diff that fixes
        nothing mostly leaves after one or two pairs. The states are drawn in lockstep, each turn
        of pairs one wave for all that are still open, since a host answers a wave per round trip."""
        gains = [{t.id: r - self.head[t.id] for t, r in zip(tasks, first)} for _, tasks, first in asks]
        if not self.noisy:
            return [any(g > 0 for g in row.values()) for row in gains]
        lead, repeats = self.policy.lead, self.policy.repeats
        pairs = [dict.fromkeys(row, 1) for row in gains]

        def going(i: int, t: Task) -> bool:
            g, k = gains[i][t.id], pairs[i][t.id]
            return g < lead and k < repeats and g + repeats - k >= lead and g >= 0 and not (k >= 2 and g <= 0)
        while opened := [(i, ts) for i, (_, tasks, _) in enumerate(asks)
                         if not any(g >= lead for g in gains[i].values()) and (ts := [t for t in tasks if going(i, t)])]:
            for (i, ts), drawn in zip(opened, self.pairs([(asks[i][0], ts) for i, ts in opened])):
                for t, (c, h) in zip(ts, drawn):
                    gains[i][t.id] += c - h
                    pairs[i][t.id] += 1
        return [any(g >= lead for g in row.values()) for row in gains]

    def reject(self, parts: Sequence[Component], reason: str) -> None:
        for comp in parts:
            for c in comp.changes:
                self.rejected[c.diff.id] = reason

    def decline(self, parts: Sequence[Component], reason: str) -> None:
        """Reject `parts` as declined by the approver (or left unanswered): no test refused them."""
        self.reject(parts, reason)
        self.kinds.update((c.diff.id, "declined") for comp in parts for c in comp.changes)

    def lose(self, parts: Sequence[Component], reason: str) -> None:
        """Reject `parts` as having lost to another change of the same keys: no test refused them."""
        self.reject(parts, reason)
        self.kinds.update((c.diff.id, "conflict_lost") for comp in parts for c in comp.changes)

    def next_wave(self, taken: set[str]) -> list[Task]:
        """Probes not yet taken: `fresh` that head has not been measured on, the rest among those it
        passes (where harm shows), then other unmeasured ones; tasks head fails come last, since
        there a candidate can only gain. A failure a diff was made from is never a probe."""
        free = [t for t in self.probes if t.id not in taken and t.id not in self.since]
        unknown = [t for t in free if t.id not in self.head]
        passing = [t for t in free if self.head.get(t.id, 0.0) > 0.0]
        failing = [t for t in free if self.head.get(t.id, 1.0) <= 0.0]
        picked = {t.id for t in unknown[: self.policy.fresh]}
        ordered = unknown[: self.policy.fresh] + passing + [t for t in unknown if t.id not in picked] + failing
        return ordered[: self.policy.wave]

    def fails_at_head(self, task: Task) -> bool:
        return self.head.get(task.id, 1.0) <= 0.0

    def test(self, ids: Sequence[str], candidate: Sequence[float], head: Sequence[float], *, gated: bool) -> Verdict:
        """The policy's paired test on these tasks, a stale diff's evidence weighted by its η; with
        samples, a net gain of the policy's `min_decisive` besides (symmetric noise alone has none)."""
        weights = [self.weights.get(i, 1.0) for i in ids]
        if all(w == 1.0 for w in weights):  # so a policy written without `weights` still serves
            verdict = self.policy(candidate, head, gated=gated)
        else:
            verdict = self.policy(candidate, head, gated=gated, weights=weights)
        net = sum((c - h) * w for c, h, w in zip(candidate, head, weights))
        if verdict.accepted and self.noisy and net < getattr(self.policy, "min_decisive", 1.0):
            return replace(verdict, accepted=False, reason=f"no measurable gain with noisy rewards (net {net:+.2f}): {verdict.reason}")
        return verdict


def unique(tasks: Sequence[Task]) -> list[Task]:
    """`tasks` without repeats, in their order."""
    return list({t.id: t for t in tasks}.values())
