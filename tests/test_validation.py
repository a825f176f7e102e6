"""Validation that pays for what it learns, the cache keyed by what a rollout saw, the bill by purpose."""

from __future__ import annotations

import random
import threading

import pytest

from agentdescent import Parallelism, events, evolve
from agentdescent.engine.loop.decisions import Amortized, OnHeldOutGain
from agentdescent.engine.loop.stopping import Progress
from agentdescent.engine.loop.validation import Measurements, Validator
from agentdescent.engine.split import split_tasks
from agentdescent.errors import BudgetSpent
from agentdescent.runs.status import RunStatus, StatusTracker
from agentdescent.testing import demo_strategy, route, route_reward
from agentdescent.types import Task
from agentdescent.usage import PURPOSES
from tests.doubles import CountingRun, numbered_tasks, router


def test_the_held_out_set_is_measured_when_it_pays_and_whole_whenever_it_counts():
    seen: list = []
    result = router(rounds=30, n_workers=4, target_reward=1.0, on_event=seen.append)
    commits = [e for e in seen if isinstance(e, events.Committed)]
    validations = [e for e in seen if isinstance(e, events.Evaluated) and e.round >= 0]
    assert result.final_reward == 1.0 and len(validations) < len(commits)
    assert all(not e.partial for e in validations if e.promoted)  # stable moves on a whole pass only
    # initial and final rewards are the whole held-out set's, measured again here from scratch
    _, held_out = split_tasks(router_tasks_of_seed0(), 0.3, random.Random("0:split"))
    strategy = demo_strategy("append")
    whole = lambda state: sum(route_reward(t, route(strategy.render(state), t)) for t in held_out) / len(held_out)  # noqa: E731
    assert result.final_reward == whole(result.state) and result.initial_reward == whole(result.initial_state)
    usage = result.usage
    assert sum(getattr(usage, p) for p in PURPOSES) == usage.rollouts and usage.validate < usage.rollouts / 2


def router_tasks_of_seed0() -> list[Task]:
    from agentdescent.testing import router_tasks

    return router_tasks(0)


def test_a_validation_stops_after_its_first_wave_only_when_nothing_could_come_of_the_rest(make_evaluator):
    held_out = numbered_tasks(16, gold="{i}")
    evaluator = make_evaluator(CountingRun())
    good, bad = {"r": "answer with the gold"}, {"r": "say nothing"}
    validator = Validator(evaluator=evaluator, held_out=held_out, train=(), schedule=Amortized(),
                          promotion=OnHeldOutGain(), target=1.0)
    assert validator.measure(bad, best=0.8) == (0.75, False)  # 0 of 4; a perfect rest reaches 0.75 < 0.8, < 1
    assert evaluator.usage.validate == 4
    assert validator.measure(bad, best=0.5) == (0.0, True)  # 0.75 could beat 0.5: the whole set is run
    assert evaluator.usage.validate == 16  # the first four from the cache
    assert validator.measure(good, best=0.5) == (1.0, True)
    assert evaluator.usage.validate == 32


def test_a_batched_run_measures_in_one_wave_and_calibrates_on_train_tasks_where_the_held_out_set_is_small(
        make_evaluator):
    held_out, train = numbered_tasks(4, gold="{i}"), numbered_tasks(10, id="s{i}", gold="{i}")
    evaluator = make_evaluator(CountingRun())
    validator = Validator(evaluator=evaluator, held_out=held_out, train=train, schedule=Amortized(),
                          promotion=OnHeldOutGain(), target=1.0, batched=True, calibrate_train=True, calibration=8,
                          noisy=lambda: None)
    assert validator.measure({"r": "say nothing"}, best=0.8) == (0.0, True)  # no first wave to stop after
    assert evaluator.usage.validate == 4
    state = {"r": "answer with the gold"}
    validator.calibrate(state)
    drawn = [t.id for t in [*held_out, *train] if len(evaluator.draws(state, t.id)) == 2]
    assert drawn == [t.id for t in [*held_out, *train[:4]]] and evaluator.usage.repeated == 8


def test_the_draws_of_a_rollout_back_but_not_yet_through_its_callback_are_read(make_evaluator):
    """A waiter may wake before a future's callbacks run: the calibration's draws of a task whose first
    rollout was the held-out measurement's read as none (the first reward was not yet recorded)."""
    evaluator, state, tasks = make_evaluator(CountingRun()), {"r": "answer with the gold"}, numbered_tasks(2, gold="{i}")
    evaluator._returned = lambda future: None  # as if every callback were yet to run
    evaluator.again([(state, tasks)], "accept")
    assert [evaluator.draws(state, t.id) for t in tasks] == [[1.0, 1.0], [1.0, 1.0]]


def test_a_batched_run_measures_beside_its_rounds_in_whole_waves_and_still_reaches_the_target():
    seen: list = []
    result = router(rounds=30, n_workers=4, target_reward=1.0, on_event=seen.append, parallelism=Parallelism(batched=True))
    validations = [e for e in seen if isinstance(e, events.Evaluated) and e.round >= 0]
    assert result.final_reward == 1.0 and validations and not any(e.partial for e in validations)


def test_the_schedule_keeps_validation_within_its_share_and_validates_when_the_target_is_near():
    due = Amortized(share=0.2, min_known=2)
    assert not due(validated=100, calls=400, held_out=100, dev_train={}, leads=3, target=None)
    assert due(validated=100, calls=900, held_out=100, dev_train={}, leads=3, target=None)
    assert due(validated=100, calls=400, held_out=100, dev_train={"a": 1.0, "b": 1.0}, leads=0, target=1.0)
    assert not due(validated=100, calls=400, held_out=100, dev_train={"a": 1.0, "b": 1.0}, leads=1, target=1.0)


def test_states_that_render_alike_share_their_rollouts(make_evaluator):
    run = CountingRun()
    evaluator = make_evaluator(run)  # an AppendRules playbook: what a rollout sees is the rules, not their keys
    tasks = numbered_tasks(3, gold="{i}")
    evaluator.rewards([{"k1": "answer with the gold"}], tasks)
    evaluator.rewards([{"k2": "answer with the gold"}], tasks)
    assert len(run.calls) == 3 and evaluator.usage.cache_hits == 3


def test_a_held_out_reward_that_counts_errors_says_so_and_the_end_runs_them_again_for_both_figures():
    tasks = numbered_tasks(12, gold="{i}")
    burst = {"on": True}  # a provider's rate limit at the start: half the rollouts fail with an error
    seen = []

    def run(rendered, task):
        if burst["on"] and int(task.id[1:]) % 2 == 0:
            raise RuntimeError("HTTP 429: rate limited")
        return task.gold

    def on_event(event):
        seen.append(event)
        if isinstance(event, events.Evaluated) and event.round == -1:
            burst["on"] = False

    result = evolve(tasks, lambda task, output: float(output == task.gold), run=run,
                    propose=lambda rendered, task, output, reward: None, rounds=1, n_workers=2, on_event=on_event)
    _, held_out = split_tasks(tasks, 0.3, random.Random("0:split"))
    failed = sum(int(t.id[1:]) % 2 == 0 for t in held_out)
    first = 1 - failed / len(held_out)
    assert 0 < failed < len(held_out) and [e.held_out_reward for e in seen if isinstance(e, events.Evaluated)] == [first]
    # nothing changed: the start's figure is the end's, whose measurement ran the errors again, not a gain
    assert result.version == result.initial_version and result.initial_reward == result.final_reward == 1.0
    [warning, again] = [w for w in result.warnings if "failed with an error" in w]
    assert f"the held-out reward at the start counts {failed} of {len(held_out)} rollouts" in warning
    assert "HTTP 429: rate limited" in warning
    assert again.startswith(f"the held-out reward at the start is 1.000, not the {first:.3f} first measured")


def test_a_held_out_task_that_always_fails_with_an_error_is_told_at_the_start_and_at_the_end():
    tasks = numbered_tasks(12, gold="{i}")
    _, held_out = split_tasks(tasks, 0.3, random.Random("0:split"))
    broken = held_out[0].id

    def run(rendered, task):
        if task.id == broken:
            raise RuntimeError("the sandbox for this task is gone")
        return task.gold

    result = evolve(tasks, lambda task, output: float(output == task.gold), run=run,
                    propose=lambda rendered, task, output, reward: None, rounds=1, n_workers=2)
    told = [w for w in result.warnings if "failed with an error" in w]
    assert [w.split(" counts")[0] for w in told] == ["the held-out reward at the start", "the held-out reward at the end"]
    assert all(f"counts 1 of {len(held_out)} rollouts" in w and "sandbox for this task is gone" in w for w in told)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_version_no_better_than_a_start_whose_grader_was_busy_is_not_promoted(asynchronous):
    """The change fixes train tasks only; the start's figure, the bar, counted a held-out task the
    grader was too busy to score as 0. That task runs again before dev is weighed against it."""
    tasks = numbered_tasks(12)
    _, held_out = split_tasks(tasks, 0.3, random.Random("0:split"))
    passing = {t.id for t in held_out[: len(held_out) // 2 + 1]}  # whatever the artifact says
    busy, rounds_begun = held_out[0].id, threading.Event()

    def reward(task, output):
        if task.id not in {t.id for t in held_out}:
            rounds_begun.set()
            return float(f"fix {task.id}" in output)
        if task.id == busy and not rounds_begun.is_set():
            raise RuntimeError("HTTP 429: the grading service is busy")
        return float(task.id in passing)

    seen = StatusTracker(RunStatus(id="r", state="running"), lambda status: None)  # what a detached run's status shows
    result = evolve(tasks, reward, run=lambda rendered, task: rendered, propose=lambda rendered, task, output, r: f"fix {task.id}",
                    rounds=2, n_workers=2, parallelism=Parallelism(asynchronous=asynchronous),
                    on_event=lambda event: isinstance(event, events.Evaluated) and seen.on_event(event))
    true, first = len(passing) / len(held_out), (len(passing) - 1) / len(held_out)
    assert result.error is None and "committed" in result.outcomes()
    assert not any(r.promoted for r in result.history)
    assert result.version == result.initial_version and result.initial_reward == result.final_reward == true
    [again] = [w for w in result.warnings if "not the" in w]
    assert again == (f"the held-out reward at the start is {true:.3f}, not the {first:.3f} first measured: "
                     "its rollouts that failed with an error ran again before a promotion was weighed against it")
    status = seen.status  # its held-out measurements, without the end's figures: no gain either
    assert (status.initial_reward, status.best_reward, status.stable_version) == (true, true, result.initial_version)


class SpentValidator:
    """A validator whose budget is spent: the start counts an error, and nothing more may run."""

    def noisy(self):
        return False  # exact rewards: nothing is weighed beside stable

    def incomplete(self, state):
        return True

    def whole(self, state):
        raise BudgetSpent("max_calls (40) reached")

    def measure(self, state, best):
        raise AssertionError("dev is weighed against a bar that counts an error as 0")


def test_a_spent_budget_leaves_the_start_figure_as_it_was_weighs_nothing_against_it_and_says_so():
    warnings, progress = [], Progress(best=0.5)
    measured = Measurements(validator=SpentValidator(), state_of=lambda version: {"v": str(version)},
                            promote=lambda version: True, stable=lambda: 1, emit=lambda event: None, progress=progress,
                            warn=warnings.append, start=(1, 0.5))
    with pytest.raises(BudgetSpent):
        measured.now(2, 0)
    assert measured.start == (1, 0.5) and progress.best == 0.5 and measured.validated == -1
    assert warnings == ["the budget was spent before the held-out rollouts that failed with an error at the start ran again: "
                        "the held-out reward at the start stays 0.500, and no version was weighed against it"]


class ScriptedDraws:
    """A noisy solver of scripted draws: for each (version, task) the rewards of its first, second,
    ... rollout, "ok" for 1 (the gold) and "no" for 0; a version is its playbook's one rule."""

    def __init__(self, script: dict[tuple[str, str], list[int]]) -> None:
        self.script, self.drawn = script, {key: 0 for key in script}
        self.lock = threading.Lock()

    def __call__(self, rendered, task: Task) -> str:
        version = "dev" if "dev" in rendered else "stable"
        with self.lock:
            n = self.drawn[(version, task.id)]
            self.drawn[(version, task.id)] += 1
        return "ok" if self.script[(version, task.id)][n] else "no"


def _weighed(make_evaluator, script: dict[tuple[str, str], list[int]], held_out: list[Task]):
    """dev measured, then weighed against stable (version 1, measured once before: the bar) with
    noisy rewards: (its figure, promoted, the run's progress, the draws made of each (version, task))."""
    run = ScriptedDraws(script)
    evaluator = make_evaluator(run)
    validator = Validator(evaluator=evaluator, held_out=held_out, train=(), schedule=Amortized(),
                          promotion=OnHeldOutGain(), target=None, batched=True, noisy=lambda: True)
    states = {1: {"r": "stable"}, 2: {"r": "dev"}}
    progress = Progress(best=evaluator.mean(states[1], held_out, "validate"))
    measured = Measurements(validator=validator, state_of=states.__getitem__, promote=lambda version: True,
                            stable=lambda: 1, emit=lambda event: None, progress=progress, start=(1, progress.best))
    reward, promoted = measured.now(2, round_=0)
    return reward, promoted, progress, run.drawn


def test_under_noise_a_tie_on_one_draw_a_task_is_drawn_again_where_dev_and_stable_disagree_and_only_there(make_evaluator):
    """A version that fixes a category tied with the one before it on one draw a task (it lost as
    many coins as it won) and was not promoted: the run's result kept the rules before it."""
    held_out = numbered_tasks(8, gold="ok")
    won, lost, same = [t.id for t in held_out[:2]], [t.id for t in held_out[2:4]], [t.id for t in held_out[4:]]
    script = {("dev", t): [1, 1] for t in won} | {("stable", t): [0, 0] for t in won}
    script |= {("dev", t): [0, 1] for t in lost} | {("stable", t): [1, 0] for t in lost}  # one coin each way: even now
    script |= {(v, t): [1] for v in ("dev", "stable") for t in same}
    reward, promoted, progress, drawn = _weighed(make_evaluator, script, held_out)  # first draws: 0.75 each
    assert promoted and reward == progress.best == (4 + 2 + 1) / 8
    assert drawn == {(v, t): 1 if t in same else 2 for v in ("dev", "stable") for t in won + lost + same}


def test_under_noise_a_decisive_lead_is_not_drawn_again_and_a_lead_of_luck_is_weighed_away(make_evaluator):
    held_out = numbered_tasks(8, gold="ok")
    # dev wins six coins of six: more than chance gives (2 standard deviations: 4.9), so settled undrawn
    script = {("dev", t.id): [1] for t in held_out} | {("stable", t.id): [0 if i < 6 else 1] for i, t in enumerate(held_out)}
    reward, promoted, progress, drawn = _weighed(make_evaluator, script, held_out)
    assert promoted and reward == 1.0 and set(drawn.values()) == {1}
    # dev ahead by three lucky coins of three (1.0 vs 0.625: a lead of 3, short of 3.46): drawn again, stable too, alike after all
    script = {("dev", t.id): [1, 0] for t in held_out[:3]} | {("stable", t.id): [0, 1] for t in held_out[:3]}
    script |= {(v, t.id): [1] for v in ("dev", "stable") for t in held_out[3:]}
    reward, promoted, progress, drawn = _weighed(make_evaluator, script, held_out)
    assert not promoted and reward == progress.best == (1.5 + 5) / 8
