"""What the run looks at: each version's probe order is drawn once; workers verify on their evidence."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from agentdescent import Parallelism, Policies, evolve
from agentdescent.engine.loop.sampling import AcceptanceSamples, Sampler
from agentdescent.step import Aggregator
from agentdescent.step.policies import BetaAcceptance
from tests.doubles import numbered_tasks, router, year_program


@dataclasses.dataclass(frozen=True, kw_only=True)
class CountingAcceptance(BetaAcceptance):
    """The default test, counting the samples it is asked to draw."""

    draws: list = dataclasses.field(default_factory=list, compare=False)

    def sample(self, train, rng):
        drawn = super().sample(train, rng)
        self.draws.append(drawn)
        return drawn


@pytest.mark.parametrize("options", [{}, {"asynchronous": True}, {"asynchronous": True, "method": "pp"}],
                         ids=["synchronous", "asynchronous", "pipelined"])
def test_each_version_s_probe_order_is_drawn_once_and_diffs_are_measured_on_their_evidence(options, monkeypatch):
    """A pipelined run's workers verify a diff on its evidence (their verification stage) before
    they hand it in; the others hand theirs in unmeasured, and the step measures them in its
    first wave."""
    verifying = options.get("method") == "pp"
    acceptance = CountingAcceptance()
    judged = []

    step = Aggregator.step

    def recording(aggregator, diffs, round_, *, sample):
        judged.append((aggregator.ledger.head(), list(diffs), sample))
        return step(aggregator, diffs, round_, sample=sample)

    monkeypatch.setattr(Aggregator, "step", recording)
    result = router(rounds=5, n_workers=4, policies=Policies(acceptance=acceptance), parallelism=Parallelism(**options))
    with result.ledger as ledger:
        head = ledger.head()
    assert len(acceptance.draws) <= head + 1  # at most one draw per version
    fresh = 0
    for version, diffs, sample in judged:
        assert any(sample is drawn for drawn in acceptance.draws), "the step judged on a sample the engine did not draw"
        for diff in diffs:
            if diff.base_version == version:  # made on head: verified on what the step's test looks at first
                fresh += 1
                verified = diff.evidence.verify_task_ids
                assert verified == (list(dict.fromkeys(diff.evidence.task_ids)) if verifying else [])
    assert fresh > 0
    assert (result.usage.verify > 0) is verifying  # else counted with the step's test, under accept
    assert result.version > 1 and result.usage.accept > 0


def test_samples_are_drawn_once_per_version_and_seeded_by_it():
    train = numbered_tasks(100)
    acceptance = CountingAcceptance(size=8)
    samples = AcceptanceSamples(policy=acceptance, train=train, seed=3)
    assert samples.of(2) is samples.of(2) and len(acceptance.draws) == 1
    other = AcceptanceSamples(policy=BetaAcceptance(size=8), train=train, seed=3)
    assert [t.id for t in other.of(2)] == [t.id for t in samples.of(2)]  # whoever asks first
    assert [t.id for t in samples.of(3)] != [t.id for t in samples.of(2)]


def test_leads_are_known_failures_until_dealt_or_seen_passing():
    train = numbered_tasks(40, id="t{i:02d}")
    told = []

    def policy(train, n, first_turn, seed, known):
        told.append(dict(known))
        return Policies().task_sampler(train, n, first_turn, seed, known)

    sampler = Sampler(policy=policy, train=train, seed=0, scouts=0)
    sampler.note({"t33": 0.0, "t34": 0.0, "t35": 1.0, "not-a-train-task": 0.0})
    [deal] = sampler.deal([0], 0, {"t34": 1.0})  # t34 passes on this snapshot
    assert told[-1] == {"t33": 0.0, "t34": 1.0}
    assert deal.batch[0].id == "t33"  # a known failure is dealt first
    sampler.deal([0], 1, {})
    assert told[-1] == {}  # dealt once, t33 is no longer a lead


def test_spares_go_to_each_turn_in_turn():
    train = numbered_tasks(40, id="t{i:02d}")
    deals = Sampler(policy=Policies().task_sampler, train=train, seed=0, scouts=2).deal([0, 1, 2], 0, {})
    assert [len(d.spares) for d in deals] == [2, 2, 2]
    dealt = [t.id for d in deals for batch in [d.batch, *d.spares] for t in batch]
    assert len(dealt) == len(set(dealt)) == 3 * 3 * 4


def _held_out_too(train, n, first_turn, seed, known):
    return [list(year_program()[0])] * n  # every task, the held-out ones among them


@pytest.mark.parametrize("sampler, said", [
    (lambda train, n, *_: [], "returned 0 minibatches, fewer than the 3 turns it deals;"),
    (lambda train, n, *_: [list(train[:2])], "returned 1 minibatch, fewer than the 3 turns it deals;"),
    (lambda train, n, *_: None, "returned None;"),
    (lambda train, n, *_: [{t.id: t for t in train}] * n, "its minibatch 1 is a dict"),
    (lambda train, n, *_: [[t.id for t in train[:2]]] * n, "its minibatch 1 holds a str, «t"),
    (_held_out_too, "which is not among the tasks it was given"),
], ids=["nothing", "too-few", "none", "a-dict", "ids", "a-task-not-given"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["synchronous", "asynchronous"])
def test_a_task_sampler_that_breaks_its_contract_stops_the_run_and_nothing_hangs(sampler, said, asynchronous):
    """A turn the sampler dealt no minibatch would be waited for forever; a task it was not given
    may be a held-out one. Either ends the run with the error, naming the sampler and the fix."""
    tasks, reward, run, propose = year_program()
    errors = []

    def attempt():
        result = evolve(tasks, reward, run=run, propose=propose, rounds=2, n_workers=3,
                        policies=Policies(task_sampler=sampler), parallelism=Parallelism(asynchronous=asynchronous))
        errors.append(result.error)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "evolve hung on a task sampler that broke its contract"
    [error] = errors
    assert error.startswith(f"the task sampler {getattr(sampler, '__qualname__')} was asked for 6 minibatches "
                            "(a minibatch and its spare for each of 3 worker turns) from ")
    assert said in error and "a list of Task objects from the tasks it was given each, and at least one for each turn" in error


def test_a_task_sampler_may_leave_a_turn_nothing_to_roll_out():
    """A sampler dealt only the tasks no turn holds may have none of the kind it deals a worker:
    that turn rolls out nothing, and the run goes on."""
    tasks, reward, run, propose = year_program()
    result = evolve(tasks, reward, run=run, propose=propose, rounds=2, n_workers=3,
                    policies=Policies(task_sampler=lambda train, n, *_: [[]] * n))
    assert result.error is None and result.usage.train == 0
