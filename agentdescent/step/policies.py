"""The decisions of the optimizer step, each a small Protocol with a shipped default.

    staleness     what becomes of a diff based on an old version, and its weight (`staleness`)
    conflict      which of two overlapping changes to keep
    fusion        how two edits of the same key are merged (False: they conflict)
    acceptance    which tasks the test probes, when it has seen enough, whether a candidate beats head

`StepPolicies` is what the step reads of a run's `config.Policies`, which bundles these with the
decisions of the loop (`engine.loop.decisions`). The step passes their arguments by position (`/`
in the Protocols: any parameter names fit), acceptance's `gated` and `weights` by keyword; what a
policy is only read for is a read-only property. What they leave out: where work runs
(executors) and what is stored (the ledger).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from agentdescent.errors import UserError
from agentdescent.step import stats
from agentdescent.step.ranges import number, whole
from agentdescent.step.staleness import StalenessPolicy
from agentdescent.step.textmerge import merge_text
from agentdescent.types import Diff, Task

Rewards = Literal["detect", "exact", "sampled"]


class ConflictPolicy(Protocol):
    def __call__(self, diffs: Sequence[Diff], staleness: Sequence[int], weight: StalenessPolicy, /) -> int:
        """Index of the diff whose edit survives when these diffs' edits of one key cannot merge."""


def evidence_score(diff: Diff, staleness: int, policy: StalenessPolicy) -> tuple[float, float]:
    """Self-verified gain first, then how many failing tasks back it; weighted by η(staleness)."""
    gain = diff.evidence.verified_gain
    w = policy.weight(staleness)
    return ((gain if gain is not None else 0.0) * w, len(diff.evidence.task_ids) * w)


@dataclass(frozen=True)
class BetterEvidence:
    """The diff with the better evidence wins; a tie goes to the one that came first."""

    def __call__(self, diffs: Sequence[Diff], staleness: Sequence[int], weight: StalenessPolicy) -> int:
        scores = [evidence_score(d, s, weight) for d, s in zip(diffs, staleness)]
        return max(range(len(diffs)), key=scores.__getitem__)


class FusionPolicy(Protocol):
    def __call__(self, base: str | None, ours: str | None, theirs: str | None, /) -> str | None | Literal[False]:
        """Merge two edits of one key made from `base`: the merged text, None for "delete the key",
        or False when they truly overlap."""


@dataclass(frozen=True)
class ThreeWayMerge:
    """git merge-file on the text; a deletion merges only with an untouched or equal side."""

    def __call__(self, base: str | None, ours: str | None, theirs: str | None) -> str | None | Literal[False]:
        if ours == theirs:
            return ours
        if ours == base:
            return theirs
        if theirs == base:
            return ours
        if ours is None or theirs is None:
            return False
        merged = merge_text(base or "", ours, theirs)
        return False if merged is None else merged


@dataclass(frozen=True, kw_only=True)
class Verdict:
    accepted: bool
    p_improve: float
    comparison: stats.PairedComparison
    reason: str


class AcceptancePolicy(Protocol):
    """The statistics of the gate (`step.accept`): where it probes, when it has seen enough, and
    whether a candidate beats head on what it saw."""

    @property
    def wave(self) -> int: ...  # probe tasks added to a candidate's test at a time
    @property
    def size(self) -> int: ...  # the most probe tasks one candidate is scored on
    @property
    def fresh(self) -> int: ...  # of each wave, the tasks not yet measured on head (the rest: tasks head is known to pass)
    @property
    def min_tasks(self) -> int: ...  # the fewest tasks a candidate is judged on: probing goes on to reach it
    # A lone component's first probes go in the wave of its evidence once the run's components
    # fixed some of theirs this often (the posterior mean, a uniform prior); above 1: never.
    @property
    def ride(self) -> float: ...
    @property
    def split(self) -> int: ...  # parts a bisection splits a set of components into, a level
    @property
    def trace_at_once(self) -> int | None: ...  # broken probes bisected together; None: all of them
    @property
    def rewards(self) -> Rewards: ...  # a reward is the truth ("exact"), a sample ("sampled"), or the run finds out ("detect")
    @property
    def calibration(self) -> int: ...  # under "detect": draws again that all agreed before the rewards are taken as exact
    @property
    def repeats(self) -> int: ...  # under noise: the most pairs of draws a task a decision hinges on is given
    @property
    def lead(self) -> float: ...  # under noise: the gain over head, summed over a task's pairs, that makes a failure fixed

    def sample(self, train: Sequence[Task], rng: random.Random) -> list[Task]:
        """A version's probe order: the train tasks the gate draws its waves from, drawn once per
        version by the engine."""

    def harm(self, kept: float, broken: float, *, gated: bool) -> bool | None:
        """After a candidate kept `kept` of the probes head passes and broke `broken`: True when it
        is safe enough to stop probing, False when it breaks too much, None while undecided."""

    def harm_rate(self, kept: float, broken: float) -> bool | None:
        """The same question where rewards are samples, `broken` counting only breaks that held
        when drawn again: a break may still be chance, so one is no verdict; True when the harm
        rate is below the bar with the policy's confidence, False when above it, else None."""

    def __call__(self, candidate: Sequence[float], head: Sequence[float], /, *, gated: bool,
                 weights: Sequence[float] | None = None) -> Verdict:
        """Accept the candidate over head on these paired rewards? `gated` asks for the stricter L1
        bar; `weights` (given only when some differ from 1) weigh each task's change, η(s) for the
        evidence of a discounted stale diff."""


@dataclass(frozen=True, kw_only=True)
class BetaAcceptance:
    """Sequential group testing with Beta posteriors.

    Gains are measured where they are claimed: on the failures a diff was made from (its
    evidence, in the step's first wave). Harm shows on tasks head passes, so probes are
    drawn from those in waves of `wave` (`fresh` of each wave new to head, so the probes move on
    between versions), until the posterior of the candidate's harm rate says it breaks fewer than
    `max_harm` of them with probability `confidence` (15 kept with none broken, at the defaults),
    or a probe breaks, or `size` probes are spent. Then the paired test: P(improvement) under
    Beta(prior + wins, prior + losses) over evidence and probes must reach `threshold`, with at
    least `min_tasks` tasks and `min_decisive` reward changed. An L1 (gated) change needs
    `gated_threshold` and `gated_confidence`. A broken probe is bisected `split` ways a level
    (as many as there are components: each asked about alone, in one wave instead of
    two, for more questions). A lone component's first probes ride with its evidence once
    the run's components have fixed their failures `ride` of the time (9 in 10: eight in a row
    at the start): the probes it pays for a diff that fixes nothing, a wave it saves the others.
    `trace_at_once` bounds how many broken probes are bisected together: None traces all of them
    in lockstep (the fewest waves); 1 traces one, drops its culprits and scores the other broken
    probes again on what is left, so a culprit that breaks several probes is bisected once (the
    fewest calls, a wave or two more a culprit).

    Rewards may be samples (a model answers the same task otherwise the next time; a judge
    flips). `rewards="detect"` (the default) finds out: a few held-out tasks are drawn twice at
    the start, and the failures a diff was made from are measured on head again (the draw that
    chose them was a failure by selection); when `calibration` such draws all agree the rewards
    are taken as exact and the test above runs as it is. Once two draws of one state on one task
    differ, the rewards are samples (`"sampled"` says so from the start; `"exact"` never draws
    again), and the test draws again where its decision hinges on a task: a failure counts as
    fixed only when the diff's gain over head, summed over fresh pairs of draws (at most
    `repeats`), reaches `lead`; a probe the candidate fails gets a second pair and is broken only
    when it breaks in both, the harm rate decided at `sampled_confidence`; a probe it gains on
    gets one where the verdict turns on it; a bisection's "it breaks" is drawn twice. A reward
    is then the mean of its draws, and the paired test asks for a net gain of `min_decisive`.
    docs/concepts.md gives the error rates.
    """

    threshold: float = 0.7
    gated_threshold: float = 0.95
    max_harm: float = 0.1
    confidence: float = 0.8
    gated_confidence: float = 0.95
    sampled_confidence: float = 0.9
    wave: int = 16
    fresh: int = 2
    size: int = 32
    min_tasks: int = 4
    min_decisive: float = 1.0
    prior: float = 1.0
    split: int = 4
    ride: float = 0.9
    trace_at_once: int | None = None
    rewards: Rewards = "detect"
    calibration: int = 24
    repeats: int = 4
    lead: float = 2.0

    def __post_init__(self) -> None:
        for name in ("threshold", "gated_threshold", "max_harm", "confidence", "gated_confidence", "sampled_confidence"):
            number(self, name, getattr(self, name), low=0, low_in=False, high=1, means="a probability")
        for name, means in (("wave", "probe tasks added to a candidate's test at a time"),
                            ("size", "the most probe tasks one candidate is scored on"),
                            ("min_tasks", "the fewest tasks a candidate is judged on"),
                            ("calibration", "draws again that all agree before rewards are taken as exact"),
                            ("repeats", "the most pairs of draws a task a decision hinges on is given")):
            whole(self, name, getattr(self, name), least=1, means=means)
        whole(self, "fresh", self.fresh, least=0, means="of each wave, the probes not yet measured on head; past "
              "the wave, the whole wave is")
        whole(self, "split", self.split, least=2,
              means="parts a bisection splits a set into, a level: into one it would ask the same question forever")
        for name, means in (("min_decisive", "the reward a candidate must change to be judged; 0: no such bar"),
                            ("ride", "how often the run's components fixed their failures before a lone component's "
                                     "probes ride with its evidence; 0: always, above 1: never")):
            number(self, name, getattr(self, name), low=0, means=means)
        number(self, "prior", self.prior, low=0, low_in=False,
               means="the Beta prior's count on each side: Beta(prior + wins, prior + losses) has none at 0")
        number(self, "lead", self.lead, low=0, low_in=False, high=self.repeats,
               means=f"the gain over head summed over a failure's pairs, at most repeats ({self.repeats}), that makes "
                     "it fixed")
        if self.rewards not in get_args(Rewards):
            raise UserError(f"BetaAcceptance(rewards={self.rewards!r}): one of {', '.join(get_args(Rewards))}")
        if self.trace_at_once is not None:
            whole(self, "trace_at_once", self.trace_at_once, least=1,
                  means="broken probes bisected together; None traces them all at once")

    def sample(self, train: Sequence[Task], rng: random.Random) -> list[Task]:
        return rng.sample(list(train), len(train))

    def harm(self, kept: float, broken: float, *, gated: bool) -> bool | None:
        if broken > 0:
            return False
        bar = self.gated_confidence if gated else self.confidence
        return True if stats.prob_harm_below(kept, broken, self.max_harm, self.prior) >= bar else None

    def harm_rate(self, kept: float, broken: float) -> bool | None:
        below = stats.prob_harm_below(kept, broken, self.max_harm, self.prior)
        bar = self.sampled_confidence
        return True if below >= bar else False if 1.0 - below >= bar else None

    def __call__(self, candidate: Sequence[float], head: Sequence[float], *, gated: bool,
                 weights: Sequence[float] | None = None) -> Verdict:
        cmp = stats.paired(candidate, head, weights)
        p = stats.prob_improvement(cmp.wins, cmp.losses, self.prior)
        bar = self.gated_threshold if gated else self.threshold
        summary = f"P(improve)={p:.2f} (bar {bar:.2f}), +{cmp.wins:.3g}/-{cmp.losses:.3g} on {cmp.n} tasks"
        if cmp.n < self.min_tasks:
            return Verdict(accepted=False, p_improve=p, comparison=cmp, reason=f"only {cmp.n} acceptance tasks; {summary}")
        if stats.paired(candidate, head).decisive < self.min_decisive:  # whole rewards changed, whatever their weight
            return Verdict(accepted=False, p_improve=p, comparison=cmp, reason=f"no measurable change: {summary}")
        return Verdict(accepted=p >= bar, p_improve=p, comparison=cmp, reason=summary)


def rewards_noisy(policy: AcceptancePolicy, repeated: int, differed: int) -> bool | None:
    """Whether a run's rewards are samples, by `policy.rewards` and the run's draws again so far
    (`repeated`, of which `differed` differed from the first): True once one differed, False when
    exact (declared, or `calibration` draws again all agreed), None while it is finding out."""
    mode = getattr(policy, "rewards", "exact")
    if mode != "detect":
        return mode == "sampled"
    return True if differed else (False if repeated >= policy.calibration else None)


class StepPolicies(Protocol):
    """The policies the optimizer step reads (a `config.Policies` has them all)."""

    @property
    def staleness(self) -> StalenessPolicy: ...
    @property
    def conflict(self) -> ConflictPolicy: ...
    @property
    def fusion(self) -> FusionPolicy: ...
    @property
    def acceptance(self) -> AcceptancePolicy: ...
