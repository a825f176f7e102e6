"""The gate as sequential group testing: evidence first, the fusion, bisection, waves only while open."""

from __future__ import annotations

import math

import pytest

from agentdescent.config import Policies
from agentdescent.errors import UserError
from agentdescent.governance import Governance
from agentdescent.ledger import Ledger
from agentdescent.step.aggregator import Aggregator
from agentdescent.step.bisect import culprits, search_all
from agentdescent.step.policies import BetaAcceptance
from agentdescent.types import Diff, Edit, EvidenceCard, Task

TASKS = [Task(id=f"t{i}", prompt=f"task {i}") for i in range(64)]
PASSING = range(32, 64)  # head passes these: where harm can show


def reward_of(state, task: Task) -> float:
    """Task i passes when a key says "fix<i>", or at head when i >= 32; "harm" breaks every third of those."""
    words = " ".join(state.values()).split()
    i = int(task.id[1:])
    if "harm" in words and i in PASSING and i % 3 == 0:
        return 0.0
    return 1.0 if f"fix{i}" in words or (i in PASSING and "base" in state) else 0.0


class CachedScorer:
    """Scores like the engine's cached evaluator: each (state, task) is one rollout, paid once."""

    def __init__(self) -> None:
        self.paid: dict[tuple[str, str], float] = {}
        self.calls: list[list[tuple[str, list[str]]]] = []  # each call's jobs that ran something: (state, task ids)

    def __call__(self, jobs):
        ran = [(repr(sorted(state.items())), [t.id for t in tasks]) for state, tasks in jobs]
        ran = [(key, [i for i in ids if (key, i) not in self.paid]) for key, ids in ran]
        if any(ids for _, ids in ran):
            self.calls.append([(key, ids) for key, ids in ran if ids])
        rows = []
        for state, tasks in jobs:
            key = repr(sorted(state.items()))
            rows.append([self.paid.setdefault((key, t.id), reward_of(state, t)) for t in tasks])
        return rows

    def states_on(self, task_ids) -> set[str]:
        """The states scored on any of these tasks."""
        return {key for key, task_id in self.paid if task_id in task_ids}


def step_of(tmp_path, diffs, *, acceptance=None):
    ledger = Ledger(tmp_path / "ledger")
    ledger.commit("a", {"base": "head"}, expected_version=0, message="seed")
    scorer = CachedScorer()
    agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), train=TASKS, score=scorer,
                     policies=Policies(acceptance=acceptance or BetaAcceptance()))
    probes = TASKS[::-1]  # the passing tasks first, then the rest
    report = agg.step(diffs, step=0, sample=probes)
    return report, ledger, scorer


def fixing(j: int, extra: str = "") -> Diff:
    """A diff that fixes task j (its evidence), with `extra` words beside the fix."""
    return Diff(id=f"d{j:02d}", artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=[f"t{j}"], rewards=[0.0]),
                edits=[Edit(key=f"k{j:02d}", before=None, after=f"fix{j} {extra}".strip())])


def kinds(report):
    return {o.diff_id: o.kind for o in report.outcomes}


def test_bisection_finds_one_planted_culprit_among_16_in_2_log2_k_questions():
    members = list(range(16))
    asked = []

    def fails(subset):
        asked.append(subset)
        return 11 in subset

    search = culprits(members)
    found = search_all({"t": search}, lambda wave: [fails(subset) for _, subset in wave])
    assert found == {"t": [[11]]}
    assert len(asked) <= 2 * math.log2(16)


def test_a_split_as_wide_as_the_set_asks_each_member_alone_in_one_wave():
    waves = []

    def ask(wave):
        waves.append(wave)
        return [11 in subset for _, subset in wave]

    found = search_all({"t": culprits(list(range(16)), arity=16)}, ask)
    assert found == {"t": [[11]]}
    assert len(waves) == 1 and sorted(len(s) for _, s in waves[0]) == [1] * 16


def test_a_split_into_fewer_than_two_parts_is_refused():
    with pytest.raises(UserError, match=r"split=1\): must be a whole number >= 2 \(parts a bisection"):
        BetaAcceptance(split=1)


def test_bisection_finds_every_culprit_and_groups_that_fail_only_together():
    found = search_all({"two": culprits(list(range(16))), "pair": culprits(list(range(4)), arity=2)},
                       lambda wave: [(key == "two" and bool({3, 12} & set(s))) or (key == "pair" and {0, 3} <= set(s))
                                     for key, s in wave])
    assert found["two"] == [[3], [12]]
    assert found["pair"] == [[0, 1, 2, 3]]  # neither half breaks it alone: the set answers for it together


def test_a_planted_harmful_diff_among_16_is_bisected_out_and_the_rest_commit(tmp_path):
    diffs = [fixing(j, "harm" if j == 5 else "") for j in range(16)]
    report, ledger, scorer = step_of(tmp_path, diffs)
    assert kinds(report) == {d.id: "rejected_by_test" if d.id == "d05" else "committed" for d in diffs}
    assert "breaks" in next(o.reason for o in report.outcomes if o.diff_id == "d05")
    assert sorted(ledger.snapshot("a")) == ["base"] + [f"k{j:02d}" for j in range(16) if j != 5]
    # Not 16 full evaluations: head and the fusion on one sample, bisection questions on the broken
    # probes only, and the fusion of the other 15 again only where the first fusion moved.
    sample = BetaAcceptance().size
    broken_probes = {t.id for t in TASKS[::-1][:sample] if int(t.id[1:]) in PASSING and int(t.id[1:]) % 3 == 0}
    questions = len(scorer.states_on(broken_probes)) - 2  # less head and the first fusion
    assert questions <= 2 * math.log2(16) + 1
    assert len(scorer.paid) < 16 * sample / 3  # a third of what scoring each diff alone on the sample costs


def test_tracing_one_broken_probe_at_a_time_bisects_a_culprit_once_however_many_probes_it_breaks(tmp_path):
    """"harm" breaks six of the first sixteen probes. Traced all at once, each of the six is
    bisected; traced one at a time, one is, and the other five are scored once more on the fusion
    without the culprit: the same verdicts for fewer rollouts, in more waves."""
    diffs = [fixing(j, "harm" if j == 5 else "") for j in range(16)]
    runs = {}
    for trace in (None, 1):
        report, ledger, scorer = step_of(tmp_path / str(trace), diffs, acceptance=BetaAcceptance(trace_at_once=trace))
        assert kinds(report) == {d.id: "rejected_by_test" if d.id == "d05" else "committed" for d in diffs}
        assert sorted(ledger.snapshot("a")) == ["base"] + [f"k{j:02d}" for j in range(16) if j != 5]
        runs[trace] = scorer
    first = {t.id for t in TASKS[::-1][:16]}
    broken = {i for i in first if int(i[1:]) % 3 == 0}
    assert len(broken) == 6

    def on_broken(scorer):  # rollouts on the broken probes beyond head's and the first fusion's
        return sum(1 for _, task in scorer.paid if task in broken) - 2 * len(broken)

    assert on_broken(runs[None]) == 6 * 2 * math.log2(16)  # each broken probe bisected: 8 questions
    assert on_broken(runs[1]) == 2 * math.log2(16) + 5  # one bisected, the other five scored once again
    assert len(runs[1].calls) > len(runs[None].calls)  # the price: waves


def test_tracing_at_once_is_at_least_one_broken_probe_or_all_of_them():
    with pytest.raises(UserError, match=r"trace_at_once=0\): must be a whole number >= 1 \(broken probes bisected together; None"):
        BetaAcceptance(trace_at_once=0)


def test_a_fusion_of_good_diffs_commits_for_the_price_of_one_sample(tmp_path):
    diffs = [fixing(j) for j in range(16)]
    report, ledger, scorer = step_of(tmp_path, diffs)
    assert set(kinds(report).values()) == {"committed"} and report.version == 2
    probes = {f"t{i}" for i in PASSING}
    assert len(scorer.states_on(probes)) == 2  # head and the one fusion: no diff is probed on its own


def test_a_lone_diff_s_probes_ride_with_its_evidence_only_when_its_worker_saw_it_fix_something(tmp_path):
    """Evidence not yet measured goes in the first wave; a lone diff's first probes join it when
    its worker verified it, and wait for it otherwise (a diff that fixes nothing is not probed)."""
    def waves(diff):
        report, _, scorer = step_of(tmp_path / diff.id, [diff])
        return report, [len(jobs) for jobs in scorer.calls]

    unmeasured = fixing(1)
    verified = unmeasured.model_copy(update={"id": "d01v", "evidence": unmeasured.evidence.model_copy(
        update={"verify_task_ids": ["t1"], "verify_before": 0.0, "verify_after": 1.0})})
    report, unmeasured_waves = waves(unmeasured)
    assert kinds(report) == {"d01": "committed"}
    report, verified_waves = waves(verified)
    assert kinds(report) == {"d01v": "committed"}
    assert len(verified_waves) == len(unmeasured_waves) - 1  # the evidence and the first probes in one
    fixes_nothing = Diff(id="d02", artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=["t2"], rewards=[0.0]),
                         edits=[Edit(key="k02", before=None, after="nothing")])
    report, nothing_waves = waves(fixes_nothing)
    assert kinds(report) == {"d02": "rejected_by_test"} and len(nothing_waves) == 1  # no probe paid for it


def test_lone_diffs_probes_ride_with_their_evidence_once_the_run_s_diffs_mostly_hold(tmp_path):
    """Eight lone diffs in a row that fix what they claim (9 in 10 by the posterior mean, the
    default `ride`): from then on a lone diff's first probes go in the wave of its evidence; one
    that fixes nothing pays for its probes then, and the next waits for its evidence again."""
    ledger = Ledger(tmp_path / "ledger")
    ledger.commit("a", {"base": "head"}, expected_version=0, message="seed")
    scorer = CachedScorer()
    agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), train=TASKS, score=scorer,
                     policies=Policies())

    def first_wave(diff):
        before = len(scorer.calls)
        agg.step([diff.model_copy(update={"base_version": ledger.head()})], step=0, sample=TASKS[::-1])
        return sum(len(ids) for _, ids in scorer.calls[before]) if len(scorer.calls) > before else 0

    alone = [first_wave(fixing(j)) for j in range(8)]
    assert alone == [2] * 8  # the candidate and head on its one evidence task, nothing else
    assert first_wave(fixing(8)) > 2  # now the first probes come along
    nothing = Diff(id="d30", artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=["t30"], rewards=[0.0]),
                   edits=[Edit(key="k30", before=None, after="nothing")])
    assert first_wave(nothing) > 2  # paid for probes it did not need
    assert first_wave(fixing(9)) == 2  # 9 held and 1 failed: 0.83 < 0.9, the evidence first again


def test_the_sample_stops_at_the_first_decisive_wave(tmp_path):
    report, _, scorer = step_of(tmp_path, [fixing(1)], acceptance=BetaAcceptance(wave=16, size=32))
    assert kinds(report) == {"d01": "committed"}
    fusion_probes = [task for key, task in scorer.paid if "fix1" in key and task != "t1"]
    assert len(fusion_probes) == 16  # 16 kept, none broken: P(harm < 0.1) = 0.83 >= 0.8 after one wave


def test_an_undecided_sample_grows_wave_by_wave_to_its_cap(tmp_path):
    acceptance = BetaAcceptance(wave=8, size=32, confidence=0.99)  # 0.99 needs 43 kept: never reached within 32
    report, _, scorer = step_of(tmp_path, [fixing(1)], acceptance=acceptance)
    assert kinds(report) == {"d01": "committed"}
    fusion_probes = [task for key, task in scorer.paid if "fix1" in key and task != "t1"]
    assert len(fusion_probes) == 32


def test_a_diff_that_fixes_none_of_its_failures_goes_no_further(tmp_path):
    idle = Diff(id="idle", artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=["t3"]),
                edits=[Edit(key="k", before=None, after="a note that fixes nothing")])
    report, _, scorer = step_of(tmp_path, [idle])
    assert kinds(report) == {"idle": "rejected_by_test"}
    assert "fixes none of the 1 failures it was made from" in report.outcomes[0].reason
    assert {task for key, task in scorer.paid if "note" in key} == {"t3"}  # never probed


@pytest.mark.parametrize("trace", [None, 1])
@pytest.mark.parametrize("harmful", [0, 1, 3])
def test_harmful_diffs_never_commit_however_many_there_are(tmp_path, harmful, trace):
    diffs = [fixing(j, "harm" if j < harmful else "") for j in range(8)]
    report, ledger, _ = step_of(tmp_path, diffs, acceptance=BetaAcceptance(trace_at_once=trace))
    assert {d for d, kind in kinds(report).items() if kind == "rejected_by_test"} == {f"d{j:02d}" for j in range(harmful)}
    assert not any("harm" in text for text in ledger.snapshot("a").values())


@pytest.mark.parametrize("rewards", ["exact", "sampled"])
def test_a_harmful_diff_merged_with_a_good_one_on_one_file_is_split_from_it(tmp_path, rewards):
    """Two diffs edit one file in different places, so they merge into one component; one breaks
    tasks head passes. Bisection cannot split a component, so the good diff went down with the
    harmful one (or the harmful one landed riding on the other's gain): each is judged alone.
    With rewards taken as samples the lone component's harm is decided first, then it is split."""
    ledger = Ledger(tmp_path / "ledger")
    notes = "one\ntwo\nthree\nfour\nfive\n"
    ledger.commit("a", {"base": "head", "notes": notes}, expected_version=0, message="seed")
    good = Diff(id="good", artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=["t3"], rewards=[0.0]),
                edits=[Edit(key="notes", before=notes, after=notes.replace("one", "fix3"))])
    harmful = Diff(id="harmful", artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=["t4"], rewards=[0.0]),
                   edits=[Edit(key="notes", before=notes, after=notes.replace("five", "fix4 harm"))])
    scorer = CachedScorer()
    agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), train=TASKS, score=scorer,
                     policies=Policies(acceptance=BetaAcceptance(rewards=rewards)),
                     again=lambda jobs: [[reward_of(state, t) for t in tasks] for state, tasks in jobs])
    report = agg.step([good, harmful], step=0, sample=TASKS[::-1])
    assert kinds(report) == {"good": "committed", "harmful": "rejected_by_test"}
    assert ledger.snapshot("a")["notes"] == "fix3\ntwo\nthree\nfour\nfive\n"
    assert "breaks" in next(o.reason for o in report.outcomes if o.diff_id == "harmful")
