"""Validation: when `dev` is measured on the held-out set, and measuring it only as far as it matters.

Held-out evaluation is for promotion to `stable`, for the target and for the reward the user is
told; it need not follow every commit. `Validator.due` asks the validation policy after a commit;
the loop also validates before patience would end the run and at its end. A measurement runs in
two waves, a quarter of the held-out set first: when the first wave already shows that dev can
no longer beat `stable` (the promotion policy at the best reward the rest could give) nor reach
the target, the rest is not run (a batched run, whose every wave is a round trip, measures in
one). That bound is exact, so a promotion always rests on the whole held-out set, as the
starting and final rewards do. A rollout that failed with an error counts as 0 in the reward it
was measured for; the starting and final rewards the user is told say so in a warning (`errored`),
and a later measurement runs it again (the evaluation cache keeps no error). Where rewards are
samples, one draw a task can tie dev with `stable`, or put it ahead, by luck: a measured dev is then
weighed against `stable` (`Validator.weigh`), both drawn again on the tasks where they disagree, and
only there, and each figure is the mean of its draws. The starting reward is
the bar the first promotion must beat, so before it serves as one, the start's rollouts that failed
with an error run again (`Measurements.now`, `later`): a version is promoted for what it gained, not
for tasks the start could not be scored on. It is set beside the final one on that footing too
(`Measurements.initial`): a run that ends where it started reports one figure, and one that moved
on runs the start's failures again first.

`Measurements` keeps which version was measured last and what each measurement did to `stable`
and the run's progress. An asynchronous run measures in the background (`later`): no step waits
on a validation, and the loop takes the answer in at the start of a later round. When the rounds
are over, `last` measures what they committed last, with what the run's budget kept back for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from agentdescent import events as ev
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.engine.loop.decisions import PromotionPolicy, ValidationPolicy
from agentdescent.engine.loop.stopping import Progress, nothing_worked
from agentdescent.errors import BudgetSpent
from agentdescent.result import StepRecord
from agentdescent.step.stats import mean_reward
from agentdescent.types import Rollout, Task

Z90 = 1.645  # standard errors either side of a mean that hold 90 % of a normal's mass
DECISIVE = 2.0  # a lead over stable that many standard deviations of chance past needs no redraw
# (the start's figure measured again, or None; dev's reward; measured whole; stable's, drawn again beside it, or None)
Answer = tuple[float | None, float, bool, float | None]


@dataclass(kw_only=True)
class Validator:
    evaluator: Evaluator
    held_out: Sequence[Task]
    train: Sequence[Task]
    schedule: ValidationPolicy
    promotion: PromotionPolicy
    target: float | None
    noisy: Callable[[], bool | None] = lambda: False  # whether rewards are samples (None: not known yet)
    calibration: int = 0  # tasks drawn twice at the start while that is not known
    batched: bool = False  # each wave a round trip: measure in one
    calibrate_train: bool = False  # calibrate on train tasks too where fewer are held out (the start's wave holds them)

    def __post_init__(self) -> None:
        self.train_ids = frozenset(t.id for t in self.train)

    def due(self, dev_state: Mapping[str, str], leads: int) -> bool:
        """Whether the validation policy asks for dev's held-out reward now."""
        usage = self.evaluator.usage
        known = self.evaluator.known(dev_state)
        return self.schedule(validated=usage.validate, calls=usage.calls, held_out=len(self.held_out),
                             dev_train={k: v for k, v in known.items() if k in self.train_ids}, leads=leads,
                             target=self.target)

    def whole(self, state: Mapping[str, str]) -> float:
        """The mean reward of `state` on the whole held-out set."""
        return self.evaluator.mean(state, self.held_out, "validate")

    def start(self, state: Mapping[str, str]) -> float:
        """The mean reward of `state` on the whole held-out set where the run starts, calibrated in
        the same wave (`calibrate`)."""
        return mean_reward(self.evaluator.read(state, self.held_out, self.calibrate(state)))

    def margin(self, state: Mapping[str, str]) -> float | None:
        """Half the width of a 90 % interval around `state`'s held-out reward, from what was
        measured (no call): 1.645 standard errors of the mean of its tasks' rewards. It covers
        both the tasks drawn and the draws of each (a task's reward is the mean of its draws)."""
        known = self.evaluator.known(state)
        rewards = [known[t.id] for t in self.held_out if t.id in known]
        if len(rewards) < 2:
            return None
        mean = sum(rewards) / len(rewards)
        variance = sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)
        return Z90 * (variance / len(rewards)) ** 0.5

    def calibrate(self, state: Mapping[str, str]) -> list[Future[Rollout]]:
        """Start measuring `state` on the whole held-out set, and return its rollouts (those this
        measurement reads, whichever failed with an error included: they are its own, not a
        later need's). While the run does not know whether its rewards are samples, draw
        `calibration` held-out tasks (or all there are) twice, in the wave that measures them: two draws
        that differ say so before the first step has to decide anything, and draws that all agree
        settle it for a run whose held-out set is large enough. With `calibrate_train` (a batched
        run with no call cap) train tasks are drawn too where the held-out set is smaller (the
        rounds find their draws in the cache), so that an exact run never pays the waves in which
        a noisy one draws again."""
        row = self.evaluator.submit([state], self.held_out, "validate")[0]
        if self.calibration and self.noisy() is None:
            tasks = [*self.held_out, *(self.train if self.calibrate_train else ())][: self.calibration]
            # the gate's, not a measurement: held-out evaluation's share of the bill, which the
            # validation schedule spends by, stays what it was
            self.evaluator.again([(state, tasks)], "accept")
        return row

    def measure(self, state: Mapping[str, str], best: float) -> tuple[float, bool]:
        """(the held-out reward of `state`, True); or (the most it could still reach, False) when it
        was stopped after the first wave, since it can no longer be promoted over `best` nor reach
        the target."""
        n = len(self.held_out)
        first = self.held_out if self.batched else self.held_out[: max(1, n // 4)]
        total = sum(self.evaluator.score([(state, first)], "validate")[0])
        ceiling = (total + n - len(first)) / n  # every reward is at most 1
        if len(first) < n and not self.promotion(best, ceiling) and (self.target is None or ceiling < self.target):
            return ceiling, False
        rest = self.held_out[len(first):]
        reward = (total + sum(self.evaluator.score([(state, rest)], "validate")[0])) / n
        self._check(state)
        return reward, True

    def weigh(self, state: Mapping[str, str], bar: Mapping[str, str]) -> tuple[float, float]:
        """The held-out rewards of `state` and of `bar` (the version a promotion must beat), each
        the mean of its draws, once both were drawn again on the tasks where they disagree: where
        rewards are samples, a task is a coin each, and one flip each way ties a version that fixes
        a category with the one it would replace. A lead past what those tasks' coins would give by
        chance (`DECISIVE` standard deviations of the sum of as many fair ±1s) settles it undrawn; a
        budget spent first leaves the figures as they were."""
        mine, theirs = self.evaluator.known(state), self.evaluator.known(bar)
        split = [t for t in self.held_out if t.id in mine and t.id in theirs and mine[t.id] != theirs[t.id]]
        lead = sum(mine[t.id] - theirs[t.id] for t in split)
        if split and abs(lead) <= DECISIVE * len(split) ** 0.5:
            with contextlib.suppress(BudgetSpent):
                self.evaluator.again([(state, split), (bar, split)], "validate")
        return self.whole(state), self.whole(bar)

    def incomplete(self, state: Mapping[str, str]) -> bool:
        """Whether a held-out task of `state` has no reward measured (its rollout failed with an error,
        here or in an earlier process of the run): `whole` runs just those."""
        known = self.evaluator.known(state)
        return any(t.id not in known for t in self.held_out)

    def errored(self, state: Mapping[str, str], when: str) -> str | None:
        """The warning for a held-out reward of `state` that counts rollouts that failed with an
        error as 0 (None: none did)."""
        errors = self.evaluator.errors(state, self.held_out)
        if not errors:
            return None
        return (f"the held-out reward {when} counts {len(errors)} of {len(self.held_out)} rollouts that failed with an "
                f"error as 0, so it may be lower than the artifact's: those tasks were not measured (a rate limit or a "
                f"timeout, say: result.usage.errors holds why). The first error: {errors[0]}")

    def _check(self, state: Mapping[str, str]) -> None:
        """`NothingWorked` when every rollout of `state`'s held-out measurement failed: their zeros
        are no reward, and a run whose agent or scorer fails on every call cannot learn."""
        errors = self.evaluator.errors(state, self.held_out)
        if self.held_out and len(errors) == len(self.held_out):
            raise nothing_worked("a held-out measurement", len(errors), errors[0])


@dataclass(kw_only=True)
class Measurements:
    """The held-out measurements of dev a run takes: where the run started, the last version measured,
    the promotions and progress they make, and at most one under way in the background."""

    validator: Validator
    state_of: Callable[[int], Mapping[str, str]]  # a version's artifact
    promote: Callable[[int], bool]  # move `stable` to a version; False when another run moved it past
    stable: Callable[[], int]  # the version `stable` is at: what a promotion weighs dev against
    emit: Callable[[ev.Event], None]
    progress: Progress
    warn: Callable[[str], None] = lambda message: None  # a warning for the result
    start: tuple[int, float | None] = (0, None)  # (version, held-out reward: None until measured) the run started from
    validated: int = -1  # the last version measured, or being measured in the background
    _measuring: tuple[int, int, Future[Answer]] | None = field(default=None, init=False)  # (version, round, answer)
    _thread: ThreadExecutor = field(default_factory=lambda: ThreadExecutor(1, name="agentdescent-validate"), init=False)

    @property
    def busy(self) -> bool:
        return self._measuring is not None

    def now(self, version: int, round_: int) -> tuple[float | None, bool]:
        """Measure `version` (as far as it matters: `Validator.measure`, the start's failed rollouts
        run again first while its figure is the bar: `_measure`) and take the answer in: (its
        held-out reward, or None when only partly measured; promoted)."""
        answer = self._measure(self.state_of(version), self._again(), self.progress.best, self._bar(version))
        self.validated = version  # only once measured: a measurement the budget cut short leaves it unmeasured
        return self._took(version, round_, *answer)

    def later(self, version: int, round_: int) -> None:
        """Start measuring `version` on a thread of its own; `take` takes the answer in."""
        answer: Future[Answer] = self._thread.submit(self._measure, self.state_of(version), self._again(), self.progress.best,
                                                     self._bar(version))
        self.validated, self._measuring = version, (version, round_, answer)

    def take(self, history: Sequence[StepRecord], *, wait: bool) -> None:
        """Take the background measurement in when it is done (or once it is, with `wait`), into
        the record of the version it measured; what it raised is raised here."""
        if self._measuring is None or not (wait or self._measuring[2].done()):
            return
        version, round_, answer = self._measuring
        self._measuring = None
        try:
            measured = answer.result()
        except BaseException:
            self.validated = -1  # it never came back: the version stays unmeasured
            raise
        held_out, promoted = self._took(version, round_, *measured)
        record = next((r for r in reversed(history) if r.version == version), None)
        if record is not None:
            record.held_out, record.promoted = held_out, promoted

    def last(self, head: int, round_: int, history: Sequence[StepRecord], *, release: Callable[[], None]) -> None:
        """The rounds are over: take in a measurement under way (or forget one the budget cut short),
        then, with what the budget kept back for it (`release`), measure `head` unless it was.
        `BudgetSpent` when even that ran out."""
        try:
            self.take(history, wait=True)
        except BudgetSpent:
            pass
        release()
        if head != self.validated:
            self.now(head, round_)

    def final(self, state: Mapping[str, str], *, measure: bool) -> float:
        """The held-out reward of `state`, the run's `stable` (measured whole when it was promoted,
        so from the cache, unless another run on the store moved `stable` on); a run stopped by an
        error, or whose budget is spent, does not spend calls to find out: the best measured."""
        if not measure:
            return self.progress.best
        try:
            reward = self.validator.whole(state)
        except BudgetSpent:
            return self.progress.best
        self.tell_errors(state, "at the end")
        return reward

    def initial(self, *, stable: int, final: float, measure: bool) -> float:
        """The held-out reward where the run started (`start`, measured), set beside the end's
        `final` of `stable`, and kept as `start`: when they are one version, `final` (one figure: the
        end's measurement ran again what failed with an error at the start, and a rate limit at the
        start is no gain). Otherwise the start's rollouts that failed with an error run again first,
        unless the run does not measure (`measure`) or its budget is spent. A changed figure is told."""
        version, reward = self.start
        assert reward is not None, "the start is measured before the end is set beside it"
        if version == stable:
            again = final
        else:
            state = self._unscored_start()
            if not measure or state is None:
                return reward
            try:
                again = self.validator.whole(state)
            except BudgetSpent:
                return reward
        if again != reward:
            self.warn(f"the held-out reward at the start is {again:.3f}, not the {reward:.3f} first measured: measured "
                      "again at the end, on the end's footing (rollouts that failed with an error run again)")
        self.start = (version, again)
        return again

    def tell_errors(self, state: Mapping[str, str], when: str) -> None:
        """Warn when the held-out reward of `state` just measured counts rollouts that failed with an error."""
        message = self.validator.errored(state, when)
        if message is not None:
            self.warn(message)

    def settle(self, *, wait: bool) -> None:
        """The run is over: with `wait`, a measurement still under way ends first (it adds to
        usage); its answer is not needed."""
        self._measuring = None
        self._thread.shutdown(wait=wait)

    def _again(self) -> Mapping[str, str] | None:
        """The start's artifact while its figure is the bar a promotion must beat (nothing promoted
        since) and counts rollouts that failed with an error as 0; None otherwise."""
        reward = self.start[1]
        return None if reward is None or self.progress.best != reward else self._unscored_start()

    def _unscored_start(self) -> Mapping[str, str] | None:
        """The start's artifact when a held-out rollout of it failed with an error (it has no
        reward yet, and a measurement runs just those); None when every one was scored."""
        state = self.state_of(self.start[0])
        return state if self.validator.incomplete(state) else None

    def _bar(self, version: int) -> Mapping[str, str] | None:
        """The artifact a measurement of `version` is weighed against (`Validator.weigh`) when the
        run's rewards are samples: `stable`'s; None when they are exact, or `version` is `stable`."""
        stable = self.stable()
        return self.state_of(stable) if stable != version and self.validator.noisy() else None

    def _measure(self, state: Mapping[str, str], start: Mapping[str, str] | None, best: float,
                 bar: Mapping[str, str] | None) -> Answer:
        """`Validator.measure` of `state` against `best`, after the start's rollouts that failed with
        an error ran again when `start` is given (its figure, measured again, is then the bar and
        first in the answer), and weighed against `bar` when given and measured whole (the bar's
        figure then last in the answer). A spent budget leaves the start's figure as it was, says so, and
        stops the measurement: no version is weighed against a bar that counts errors as 0."""
        again = None
        if start is not None:
            try:
                again = best = self.validator.whole(start)
            except BudgetSpent:
                self.warn(f"the budget was spent before the held-out rollouts that failed with an error at the start ran "
                          f"again: the held-out reward at the start stays {best:.3f}, and no version was weighed against it")
                raise
        reward, whole = self.validator.measure(state, best)
        if bar is None or not whole:
            return again, reward, whole, None
        mine, theirs = self.validator.weigh(state, bar)
        return again, mine, whole, theirs

    def _took(self, version: int, round_: int, again: float | None, reward: float, whole: bool,
              bar: float | None) -> tuple[float | None, bool]:
        progress = self.progress
        if again is not None:  # the start's figure, its failed rollouts run again: the bar from now on
            first, self.start = self.start[1], (self.start[0], again)
            progress.best = again
            if again != first:
                self.warn(f"the held-out reward at the start is {again:.3f}, not the {first:.3f} first measured: its "
                          "rollouts that failed with an error ran again before a promotion was weighed against it")
                self.emit(ev.Evaluated(round=-1, version=self.start[0], held_out_reward=again, promoted=False, best_reward=again))
        if bar is not None:  # stable's figure, drawn again beside dev's: the mean of more draws than the one it was promoted on
            progress.best = bar
        promoted = whole and self.validator.promotion(progress.best, reward) and self.promote(version)
        if promoted:
            progress.best, progress.since_gain = reward, 0
        else:
            progress.since_gain += 1
        self.emit(ev.Evaluated(round=round_, version=version, held_out_reward=reward, promoted=promoted,
                               best_reward=progress.best, partial=not whole))
        return (reward if whole else None), promoted
