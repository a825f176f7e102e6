"""The gate where a rollout is a sample, not the truth: on the noisy reference domain
(agentdescent/testing/noisy.py), each diff judged by the real optimizer step on a real ledger
(`testing.lone_diff`), its rollouts run by the run's own evaluator, every verdict checked against
the domain's ground truth, on every seed."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time

import pytest

from agentdescent import AppendRules, Parallelism, evolve
from agentdescent.artifacts.strategies import rule_key
from agentdescent.config import Policies
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.reflect import reflector
from agentdescent.reflect.memory import Memory
from agentdescent.step.policies import BetaAcceptance, rewards_noisy
from agentdescent.testing.lone_diff import LoneDiff
from agentdescent.testing.noisy import VAGUE, NoisyDomain, NoisyLevels, harmful_rule, right_category, right_rule, verdict
from agentdescent.types import Diff, Edit, EvidenceCard, Rollout, Task, Tried
from agentdescent.usage import Usage

SEEDS = range(10)
NOISY = NoisyLevels(p=0.85, q=0.1)


@pytest.fixture
def trial():
    made: list[LoneDiff] = []

    def make(seed: int, levels: NoisyLevels = NOISY) -> LoneDiff:
        made.append(LoneDiff(levels, seed=seed))
        return made[-1]
    yield make
    for t in made:
        t.close()


def test_a_planted_harmful_rule_is_refused_on_every_seed(trial):
    """It fixes its own category as the right rule does, and breaks the plain tasks, which pass."""
    for seed in SEEDS:
        assert trial(seed).judge(harmful_rule(5, "plain"), category=5) != "committed", f"seed {seed}"


def test_a_harmful_rule_that_breaks_as_much_as_it_fixes_is_refused_on_most_seeds(trial):
    """Breaking a learnt category of six tasks while fixing its own six, it gains nothing on the
    whole: its breaks show only where the probes meet that category (bench/gate_error_rates.py
    gives the rate)."""
    assert sum(trial(seed).judge(harmful_rule(5, 1), category=5) != "committed" for seed in SEEDS) >= 8


class OnlyTheProtocol:
    """An acceptance policy of a user's own: every member `AcceptancePolicy` declares, and nothing
    else, answered by a `BetaAcceptance` it keeps."""

    def __init__(self) -> None:
        self._beta = BetaAcceptance(rewards="sampled")

    def __getattr__(self, name: str):
        if name in {"wave", "size", "fresh", "min_tasks", "ride", "split", "trace_at_once", "rewards", "calibration",
                    "repeats", "lead", "sample", "harm", "harm_rate"}:
            return getattr(self._beta, name)
        raise AttributeError(name)

    def __call__(self, candidate, head, /, *, gated, weights=None):
        return self._beta(candidate, head, gated=gated, weights=weights)


def test_a_policy_of_the_users_own_judges_as_the_one_it_follows(trial):
    """The gate asked a harmful rule's refusal of `max_harm`, which only `BetaAcceptance` has: a
    policy meeting the Protocol broke the run on its first such refusal."""
    for seed in range(4):
        ours = LoneDiff(NOISY, seed=seed, acceptance=OnlyTheProtocol())
        try:
            theirs = ours.judge(harmful_rule(5, "plain"), category=5)
        finally:
            ours.close()
        assert theirs == trial(seed).judge(harmful_rule(5, "plain"), category=5) != "committed", f"seed {seed}"


def test_a_vague_rule_is_never_committed(trial):
    """It changes nothing: whatever it seems to fix or break is chance, and chance is no gain."""
    for seed in SEEDS:
        assert trial(seed).judge(VAGUE[seed % len(VAGUE)], category=6) != "committed", f"seed {seed}"


def test_the_right_rule_is_committed_on_most_seeds_and_head_is_drawn_again_where_it_was_chosen(trial):
    committed = 0
    for seed in SEEDS:
        t = trial(seed)
        committed += t.judge(right_rule(5), category=5) == "committed"
        assert len(t.evaluator.draws(t.head, t.failure(5).id)) >= 2  # the failing draw that chose it, and one since
    assert committed >= 7


def test_a_decisive_case_stops_early(trial):
    """A fix that never fails against a head that never passes: its failure is drawn the fewest
    times the lead allows (the candidate twice, head three times: the draw that chose it, one
    more, and one more pair)."""
    t = trial(0, NoisyLevels(p=1.0, q=0.0))
    assert t.judge(right_rule(5), category=5) == "committed"
    task, fixed = t.failure(5), {**t.head, rule_key(right_rule(5)): right_rule(5)}
    assert len(t.evaluator.draws(fixed, task.id)) == 2 and len(t.evaluator.draws(t.head, task.id)) == 3
    assert t.usage.disagreed == 0


def test_the_diffs_of_a_step_draw_their_pairs_together(trial):
    """Two diffs that each fix their failure: the pair each needs past its evidence comes in one
    wave, not one after the other (a host answers a wave per round trip)."""
    t = trial(0, NoisyLevels(p=1.0, q=0.0))
    failures = {c: t.failure(c) for c in (5, 6)}
    diffs = [Diff(id=f"d{c}", artifact_id="a", base_version=1, author=f"w{c}",
                  evidence=EvidenceCard(task_ids=[task.id], rewards=[0.0], rationale=right_rule(c)),
                  edits=[Edit(key=rule_key(right_rule(c)), before=None, after=right_rule(c))])
             for c, task in failures.items()]
    waves: list[set[str]] = []
    again = t.evaluator.again

    def counted(jobs, purpose="accept"):
        waves.append({task.id for _, tasks in jobs for task in tasks})
        return again(jobs, purpose)
    t.aggregator.again = counted
    sample = t.acceptance.sample(t.tasks, random.Random(0))
    assert [o.kind for o in t.aggregator.step(diffs, 0, sample=sample).outcomes] == ["committed", "committed"]
    both = {task.id for task in failures.values()}
    assert [wave & both for wave in waves if wave & both] == [both, both]  # head's draw again, then the pairs


def test_a_run_finds_out_whether_its_rewards_are_samples():
    noisy, clean = NoisyDomain(NOISY, seed=0), NoisyDomain(NoisyLevels(p=1.0, q=0.0, right=1.0, vague=0.0), seed=0)
    found = evolve(noisy.tasks(), noisy.reward, run=noisy.run, propose=noisy.propose, strategy=AppendRules(),
                   rounds=2, n_workers=4, seed=0)
    assert found.usage.disagreed > 0
    assert 0 < found.final_margin < 0.5  # how sure its held-out reward is, from what it measured
    assert type(found).from_json(found.to_json()).final_margin == found.final_margin
    assert rewards_noisy(BetaAcceptance(), found.usage.repeated, found.usage.disagreed) is True
    exact = evolve(clean.tasks(), clean.reward, run=clean.run, propose=clean.propose, strategy=AppendRules(),
                   rounds=2, n_workers=4, seed=0, policies=Policies(acceptance=BetaAcceptance(rewards="exact")))
    assert exact.usage.repeated == 0 and exact.final_reward == 1.0 and exact.final_margin == 0.0
    detected = evolve(clean.tasks(), clean.reward, run=clean.run, propose=clean.propose, strategy=AppendRules(),
                      rounds=2, n_workers=4, seed=0)
    assert detected.usage.disagreed == 0 and 0 < detected.usage.repeated <= 2 * BetaAcceptance().calibration
    assert detected.final_reward == 1.0


def test_a_reward_is_the_mean_of_its_draws_and_a_second_rollout_read_back_is_a_draw_again():
    flips = iter([1.0, 0.0, 1.0, 1.0])
    task = Task(id="t", prompt="p")
    evaluator = Evaluator(strategy=AppendRules(), run=lambda rendered, t: "x", reward=lambda t, o: next(flips),
                          pool=ThreadExecutor(1), usage=Usage())
    state: dict[str, str] = {}
    assert evaluator.score([(state, [task])]) == [[1.0]]
    assert evaluator.again([(state, [task])]) == [[0.0]]
    assert evaluator.known(state) == {"t": 0.5} and evaluator.score([(state, [task])]) == [[0.5]]
    assert (evaluator.usage.repeated, evaluator.usage.disagreed, evaluator.usage.rollouts) == (1, 1, 2)
    assert evaluator.again([(state, [task]), (state, [task])]) == [[1.0], [1.0]]
    assert evaluator.draws(state, "t") == [1.0, 0.0, 1.0, 1.0]

    resumed = Evaluator(strategy=AppendRules(), run=lambda rendered, t: "x", reward=lambda t, o: 1.0,
                        pool=ThreadExecutor(1), usage=Usage())
    key, _ = resumed.view(state)
    resumed.preload([(key, Rollout(task=task, output="x", reward=r)) for r in (1.0, 0.0)])
    assert resumed.known(state) == {"t": 0.5} and resumed.draws(state, "t") == [1.0, 0.0]


def test_a_reworded_right_rule_counts_as_learnt_once_and_its_second_wording_as_restated():
    domain = NoisyDomain(NoisyLevels(p=1.0, q=0.0, right=1.0, vague=0.0, reword=1.0), seed=0)
    task = next(t for t in domain.tasks() if t.meta["category"] == 5)
    reworded = domain.propose("", task, "fail", 0.0)
    assert reworded != right_rule(5) and right_category(reworded) == 5
    assert verdict(domain.run(f"- {reworded}", task)) == "pass"  # each wording works as well
    truth = domain.truth(f"- {right_rule(5)}\n- {reworded}\n- {right_rule(6)}")
    assert (truth.learnt, truth.restated, truth.harmful, truth.vague) == (2, 1, 0, 0)
    assert right_category(harmful_rule(5, "plain")) is None and right_category(VAGUE[0]) is None


def test_a_replacement_rewords_one_rule():
    strategy, old = AppendRules(), harmful_rule(2, "plain")
    state = {rule_key(old): old}
    edits = strategy.edits_for(state, f"replace: {old} => {right_rule(2)}")
    assert [(e.key, e.after) for e in edits] == [(rule_key(old), None), (rule_key(right_rule(2)), right_rule(2))]
    with pytest.raises(Exception, match="no rule"):
        strategy.edits_for(state, "replace: Be brief. => Be terse.")
    with pytest.raises(Exception, match="replace: <rule> => <new rule>"):
        strategy.edits_for(state, f"replace: {old}")


def test_the_reflector_is_told_what_was_refused_and_only_where_rewards_are_exact():
    prompts: list[str] = []

    def model(prompt: str) -> str:
        prompts.append(prompt)
        return "<rule>Quote the code.</rule>"

    tried = [Tried(proposal="Be more careful.", why="fixes none of the 1 failures it was made from")]
    assert reflector(model)("- a rule", Task(id="t", prompt="q", gold="g"), "out", 0.0, tried=tried) == "Quote the code."
    assert "Be more careful. (refused: fixes none of the 1 failures it was made from)" in prompts[-1]
    reflector(model)("- a rule", Task(id="t", prompt="q", gold="g"), "out", 0.0)
    assert "refused" not in prompts[-1]

    memory = Memory(kept=2)
    for rule in ("A.", "B.", "C."):
        memory.refused(rule, "rejected: breaks t1, which head passes")
    assert [t.proposal for t in memory.recent(noisy=False)] == ["B.", "C."]
    assert memory.recent(noisy=False)[0].why == "breaks t1, which head passes"
    assert memory.recent(noisy=True) == [] and memory.recent(noisy=None) == []


def test_a_propose_that_takes_tried_is_handed_the_refusals_of_a_run_with_exact_rewards():
    clean = NoisyDomain(NoisyLevels(p=1.0, q=0.0, right=0.5, vague=0.5), seed=0)
    handed: list[list[Tried]] = []

    def propose(rendered, task, output, reward, *, tried=()):
        handed.append(list(tried))
        return clean.propose(rendered, task, output, reward, tried=tried)

    evolve(clean.tasks(), clean.reward, run=clean.run, propose=propose, strategy=AppendRules(), rounds=4,
           n_workers=4, seed=0, policies=Policies(acceptance=BetaAcceptance(rewards="exact")))
    told = {t.proposal for batch in handed for t in batch}
    assert told and told <= set(VAGUE)  # what was refused, and nothing else
    assert not handed[0]



def test_a_grade_belongs_to_its_rollout_whichever_order_rollouts_are_graded_in():
    levels = NoisyLevels(flip=0.5)
    first, second = NoisyDomain(levels, seed=4), NoisyDomain(levels, seed=4)
    rollouts = [(task, first.run(rendered, task)) for task in first.tasks() for rendered in ("", f"- {right_rule(0)}")]
    assert [second.run(rendered, task) for task in second.tasks() for rendered in ("", f"- {right_rule(0)}")] == [
        o for _, o in rollouts]
    graded = [first.reward(task, output) for task, output in rollouts]
    assert [second.reward(task, output) for task, output in reversed(rollouts)] == graded[::-1]
    assert {verdict(o) for _, o in rollouts} == {"pass", "fail"} and 0 < sum(graded) < len(graded)
    task, output = rollouts[0]
    assert len({first.reward(task, output) for _ in range(40)}) == 2  # graded again, a grader may answer otherwise


def test_one_worker_and_one_seed_make_one_run_whatever_order_its_rollouts_arrive_in():
    jitter = random.Random()  # unseeded: each rollout and grade waits its own while, so the order they land in varies

    def fingerprint() -> tuple:
        domain = NoisyDomain(NoisyLevels(p=0.85, q=0.1, flip=0.3), seed=3)

        def run(rendered, task):
            time.sleep(jitter.random() * 0.002)
            return domain.run(rendered, task)

        def reward(task, output):
            time.sleep(jitter.random() * 0.001)
            return domain.reward(task, output)
        result = evolve(domain.tasks(), reward, run=run, propose=domain.propose, strategy=AppendRules(), rounds=6,
                        n_workers=1, max_concurrency=8, seed=1, parallelism=Parallelism(reissue_after=None))
        history = [{k: v for k, v in s.model_dump().items() if k not in ("timings", "cost_usd")} for s in result.history]
        return (result.state, result.final_reward, result.usage.calls,
                hashlib.sha256(json.dumps(history, sort_keys=True, default=str).encode()).hexdigest())
    runs: list[tuple] = []
    threads = [threading.Thread(target=lambda: runs.append(fingerprint())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 4 and runs[1:] == runs[:1] * 3
