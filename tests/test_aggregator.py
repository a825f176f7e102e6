"""The five stages of the optimizer step, on a real git ledger and a deterministic scorer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.artifacts.state import apply
from agentdescent.config import Policies
from agentdescent.governance import Governance
from agentdescent.ledger import Ledger
from agentdescent.step.aggregator import Aggregator
from agentdescent.step.policies import BetaAcceptance
from agentdescent.types import Diff, Edit, EvidenceCard, Task

TASKS = [Task(id=f"t{i}", prompt=f"task {i}") for i in range(10)]


def reward_of(state, task: Task) -> float:
    """Task i passes when some key says "fix<i>"; "harm" breaks every even task; "A" with "B" breaks all."""
    text = "\n".join(state.values())
    i = int(task.id[1:])
    if "harm" in text and i % 2 == 0:
        return 0.0
    if "A!" in text and "B!" in text:
        return 0.0
    return 1.0 if f"fix{i}" in text.split() else 0.0


def score(jobs):
    return [[reward_of(state, t) for t in tasks] for state, tasks in jobs]


def make(tmp_path, state, *, governance=None, policies=None, lag_budget=None, score_fn=score):
    ledger = Ledger(tmp_path / "ledger")
    ledger.commit("a", state, expected_version=0, message="seed")
    agg = Aggregator(
        ledger=ledger, artifact_id="a", governance=governance or Governance(),
        policies=policies or Policies(acceptance=BetaAcceptance(size=10)), train=TASKS,
        score=score_fn, lag_budget=lag_budget,
    )
    return ledger, agg


def diff(id_, base, edits, *, before=None, tasks=(), gain=None, author="w0", artifact="a"):
    before = before or {}
    card = EvidenceCard(task_ids=list(tasks), verify_before=0.0 if gain is not None else None,
                        verify_after=gain)
    return Diff(id=id_, artifact_id=artifact, base_version=base, author=author, evidence=card,
                edits=[Edit(key=k, before=before.get(k), after=v) for k, v in edits.items()])


def kinds(report):
    return {o.diff_id: o.kind for o in report.outcomes}


def test_apply_writes_and_deletes():
    assert apply({"a": "1", "b": "2"}, {"a": None, "c": "3"}) == {"b": "2", "c": "3"}


def test_disjoint_keys_fuse_into_one_commit(tmp_path):
    ledger, agg = make(tmp_path, {})
    report = agg.step([diff("d1", 1, {"k1": "fix1"}, tasks=["t1"]), diff("d2", 1, {"k2": "fix2"}, tasks=["t2"])], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "committed", "d2": "committed"}
    assert report.version == 2
    assert ledger.snapshot("a") == {"k1": "fix1", "k2": "fix2"}
    record = ledger.log(limit=1)[0]
    assert record.trailers["Diffs"] == "d1,d2" and record.trailers["Staleness"] == "0,0"


def test_every_diff_gets_exactly_one_outcome(tmp_path):
    seed = {"frozen.md": "x", "base": "fix0 fix2 fix4 fix6 fix8"}
    _, agg = make(tmp_path, seed, governance=Governance(frozen=("frozen.md",)))
    diffs = [
        diff("good", 1, {"k1": "fix1"}, tasks=["t1"]),
        diff("same", 1, {"k1": "fix1"}, tasks=["t1"]),
        diff("harm", 1, {"k2": "fix3 harm"}, tasks=["t3"]),
        diff("frozen", 1, {"frozen.md": "y"}, before={"frozen.md": "x"}),
        diff("alien", 1, {"k3": "fix4"}, artifact="other"),
        diff("escape", 1, {"../x": "fix5"}),
    ]
    report = agg.step(diffs, step=0, sample=TASKS)
    assert [o.diff_id for o in report.outcomes] == [d.id for d in diffs]
    assert kinds(report) == {
        "good": "committed", "same": "duplicate", "harm": "rejected_by_test",
        "frozen": "refused_by_governance", "alien": "invalid", "escape": "invalid",
    }
    reasons = {o.diff_id: o.reason for o in report.outcomes}
    assert "frozen.md" in reasons["frozen"] and "P(improve)" in reasons["harm"]


def test_too_many_keys_refused(tmp_path):
    _, agg = make(tmp_path, {}, governance=Governance(max_keys_per_diff=1))
    report = agg.step([diff("d1", 1, {"k1": "fix1", "k2": "fix2"})], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "refused_by_governance"}
    assert "at most 1" in report.outcomes[0].reason
    assert report.version is None


def test_same_key_disjoint_hunks_merge_three_way(tmp_path):
    base = "line one\nline two\nline three\n"
    ledger, agg = make(tmp_path, {"doc": base})
    ours = diff("d1", 1, {"doc": "fix1\nline two\nline three\n"}, before={"doc": base}, tasks=["t1"])
    theirs = diff("d2", 1, {"doc": "line one\nline two\nfix2\n"}, before={"doc": base}, tasks=["t2"])
    report = agg.step([ours, theirs], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "fused", "d2": "fused"}
    assert ledger.snapshot("a")["doc"] == "fix1\nline two\nfix2\n"


def test_lines_added_at_one_place_stack_and_each_is_judged_alone(tmp_path):
    """git calls two rules added at the end of one list a conflict; they stack instead, each its
    own component: the good ones land together, the harmful one is refused alone."""
    base = "# rules\n"
    ledger, agg = make(tmp_path, {"doc": base, "passing": "fix0 fix2 fix4 fix6 fix8"})
    one = diff("d1", 1, {"doc": base + "fix1\n"}, before={"doc": base}, tasks=["t1"])
    two = diff("d2", 1, {"doc": base + "fix3\n"}, before={"doc": base}, tasks=["t3"])
    bad = diff("bad", 1, {"doc": base + "fix5 harm\n"}, before={"doc": base}, tasks=["t5"])
    again = diff("again", 1, {"doc": base + "fix3\n"}, before={"doc": base}, tasks=["t3"])
    report = agg.step([one, two, bad, again], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "committed", "d2": "committed", "bad": "rejected_by_test", "again": "duplicate"}
    assert ledger.snapshot("a")["doc"] == base + "fix1\nfix3\n"
    assert ledger.log(limit=1)[0].trailers["Diffs"] == "d1,d2"


@settings(max_examples=25, deadline=None)
@given(places=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1, 3, 5, 7, 9]), st.booleans()),
                       min_size=1, max_size=5))
def test_stacked_insertions_land_exactly_as_judged(tmp_path_factory, places):
    """Diffs each inserting one line somewhere in one file, some harmful: the file that lands holds
    its old lines in order, every committed diff's line, and no refused diff's line."""
    base = "".join(f"line {i}\n" for i in range(3))
    lines = base.splitlines(keepends=True)
    ledger, agg = make(tmp_path_factory.mktemp("stack"), {"doc": base, "passing": "fix0 fix2 fix4 fix6 fix8"})
    diffs = [diff(f"d{n}", 1, {"doc": "".join(lines[:at] + [f"fix{task}{' harm' if harm else ''}\n"] + lines[at:])},
                  before={"doc": base}, tasks=[f"t{task}"]) for n, (at, task, harm) in enumerate(places)]
    outcomes = kinds(agg.step(diffs, step=0, sample=TASKS))
    landed = ledger.snapshot("a")["doc"].splitlines(keepends=True)
    assert [line for line in landed if line in lines] == lines
    added = {d.id: next(line for line in d.edits[0].after.splitlines(keepends=True) if line not in lines) for d in diffs}
    kept = {added[i] for i, kind in outcomes.items() if kind in ("committed", "fused")}
    assert set(landed) - set(lines) == kept  # a refused diff's line is there only as a kept one's
    assert not any("harm" in line for line in kept)


def test_a_change_beside_stacked_insertions_is_a_conflict_with_all_of_them(tmp_path):
    base = "# rules\n"
    ledger, agg = make(tmp_path, {"doc": base})
    adds = [diff(f"d{i}", 1, {"doc": base + f"fix{i}\n"}, before={"doc": base}, tasks=[f"t{i}"], gain=0.5) for i in (1, 3)]
    rewrite = diff("rewrite", 1, {"doc": "fix7\n"}, before={"doc": base}, tasks=["t7"], gain=1.0)
    report = agg.step([*adds, rewrite], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "conflict_lost", "d3": "conflict_lost", "rewrite": "committed"}
    assert ledger.snapshot("a")["doc"] == "fix7\n"


def test_true_overlap_goes_to_better_evidence_and_loser_keeps_other_keys(tmp_path):
    ledger, agg = make(tmp_path, {"doc": "old\n"})
    weak = diff("weak", 1, {"doc": "fix1\n", "k9": "fix9"}, before={"doc": "old\n"}, tasks=["t1", "t9"], gain=0.1)
    strong = diff("strong", 1, {"doc": "fix2\n"}, before={"doc": "old\n"}, tasks=["t2"], gain=0.9)
    loser_only = diff("lost", 1, {"doc": "fix3\n"}, before={"doc": "old\n"}, tasks=["t3"], gain=0.0)
    report = agg.step([weak, strong, loser_only], step=0, sample=TASKS)
    assert kinds(report) == {"weak": "committed", "strong": "committed", "lost": "conflict_lost"}
    state = ledger.snapshot("a")
    assert state == {"doc": "fix2\n", "k9": "fix9"}
    weak_reason = next(o.reason for o in report.outcomes if o.diff_id == "weak")
    assert "doc" in weak_reason and "lost" in weak_reason


def test_diffs_that_came_unmeasured_are_measured_before_the_conflict_policy_ranks_their_overlap(tmp_path):
    """Workers hand their diffs in unmeasured; where two overlap, the step measures just those two
    on their own failures first, so the one that fixes more of what it claims wins, not the one
    that claims more."""
    scored = []

    def recording(jobs):
        scored.append([(dict(state), [t.id for t in tasks]) for state, tasks in jobs])
        return score(jobs)

    def step(verify_contested):
        ledger, agg = make(tmp_path / str(verify_contested), {"doc": "old\n"}, score_fn=recording)
        agg.verify_contested = verify_contested
        claims_more = diff("more", 1, {"doc": "fix1\n"}, before={"doc": "old\n"}, tasks=["t1", "t3"])  # fixes t1 of two
        fixes_more = diff("fixes", 1, {"doc": "fix2\n"}, before={"doc": "old\n"}, tasks=["t2"])  # fixes its one
        apart = diff("apart", 1, {"k5": "fix5"}, tasks=["t5"])
        scored.clear()
        return kinds(agg.step([claims_more, fixes_more, apart], step=0, sample=TASKS)), ledger.snapshot("a")

    outcomes, state = step(True)
    assert outcomes == {"more": "conflict_lost", "fixes": "committed", "apart": "committed"}
    assert state == {"doc": "fix2\n", "k5": "fix5"}
    first = scored[0]  # one wave: the two rivals against head on their evidence, and nothing else
    assert sorted(tasks for _, tasks in first) == [["t1", "t3"], ["t1", "t3"], ["t2"], ["t2"]]
    assert not any("k5" in state for state, _ in first)
    outcomes, state = step(False)  # unmeasured: the policy goes by how many failures back each
    assert outcomes["more"] == "committed" and outcomes["fixes"] == "conflict_lost"


def test_stale_diff_rebases_onto_head_by_three_way_merge(tmp_path):
    base = "alpha\nbeta\ngamma\n"
    ledger, agg = make(tmp_path, {"doc": base})
    agg.step([diff("first", 1, {"doc": "fix1\nbeta\ngamma\n"}, before={"doc": base}, tasks=["t1"])], step=0, sample=TASKS)
    late = diff("late", 1, {"doc": "alpha\nbeta\nfix2\n"}, before={"doc": base}, tasks=["t2"])
    report = agg.step([late], step=1, sample=TASKS)
    assert kinds(report) == {"late": "committed"}
    assert ledger.snapshot("a")["doc"] == "fix1\nbeta\nfix2\n"
    assert ledger.log(limit=1)[0].trailers["Staleness"] == "1"


def test_stale_diff_that_adds_a_line_where_head_added_one_goes_after_it(tmp_path):
    base = "# rules\n"
    ledger, agg = make(tmp_path, {"doc": base})
    agg.step([diff("first", 1, {"doc": base + "fix1\n"}, before={"doc": base}, tasks=["t1"])], step=0, sample=TASKS)
    report = agg.step([diff("late", 1, {"doc": base + "fix2\n"}, before={"doc": base}, tasks=["t2"])], step=1, sample=TASKS)
    assert kinds(report) == {"late": "committed"}
    assert ledger.snapshot("a")["doc"] == base + "fix1\nfix2\n"


def test_stale_overlap_is_a_conflict_and_past_budget_is_dropped(tmp_path):
    ledger, agg = make(tmp_path, {"doc": "x\n"}, lag_budget=1)
    agg.step([diff("d1", 1, {"doc": "fix1\n"}, before={"doc": "x\n"}, tasks=["t1"])], step=0, sample=TASKS)
    report = agg.step([diff("d2", 1, {"doc": "fix2\n"}, before={"doc": "x\n"}, tasks=["t2"])], step=1, sample=TASKS)
    assert kinds(report) == {"d2": "conflict_lost"}
    agg.step([diff("d3", 2, {"k": "fix3"}, tasks=["t3"])], step=2, sample=TASKS)
    report = agg.step([diff("d4", 1, {"k4": "fix4"}, tasks=["t4"])], step=3, sample=TASKS)
    assert kinds(report) == {"d4": "dropped_stale"}
    assert "lag budget is 1" in report.outcomes[0].reason


def test_edit_that_does_not_start_from_its_base_is_invalid(tmp_path):
    _, agg = make(tmp_path, {"doc": "x\n"})
    report = agg.step([diff("d1", 1, {"doc": "fix1\n"}, before={"doc": "something else"})], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "invalid"}


def test_fused_candidate_that_fails_keeps_only_the_best_component(tmp_path):
    ledger, agg = make(tmp_path, {})
    a = diff("a", 1, {"ka": "fix1 fix3 A!"}, tasks=["t1"])
    b = diff("b", 1, {"kb": "fix2 B!"}, tasks=["t2"])
    report = agg.step([a, b], step=0, sample=TASKS)
    assert kinds(report) == {"a": "committed", "b": "rejected_by_test"}
    assert "fused candidate did not" in next(o.reason for o in report.outcomes if o.diff_id == "b")
    assert set(ledger.snapshot("a")) == {"ka"}


def test_gated_keys_need_the_stricter_bar(tmp_path):
    gov = Governance(blast_radius={"agents/*": "L1"})
    _, agg = make(tmp_path, {}, governance=gov)
    report = agg.step([diff("one", 1, {"agents/x.md": "fix1"}, tasks=["t1"])], step=0, sample=TASKS)
    assert kinds(report) == {"one": "rejected_by_test"}
    many = " ".join(f"fix{i}" for i in range(10))
    report = agg.step([diff("all", 1, {"agents/y.md": many}, tasks=["t1"])], step=1, sample=TASKS)
    assert kinds(report) == {"all": "committed"}


def another_writer(tmp_path, start: dict, theirs: dict, message: str = "x"):
    """`make`'s ledger and aggregator, with another writer committing `theirs` onto version 1
    while the step scores its candidate (another process on the same store)."""
    ledger = None

    def interfering(jobs):
        if ledger.head() == 1:
            ledger.commit("a", theirs, expected_version=1, message=message)
        return score(jobs)

    ledger, agg = make(tmp_path, start, score_fn=interfering)
    return ledger, agg


def test_another_writer_moving_dev_is_carried_over(tmp_path):
    ledger, agg = another_writer(tmp_path, {}, {"other": "theirs"})  # a change on another key
    report = agg.step([diff("d1", 1, {"k1": "fix1"}, tasks=["t1"])], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "committed"}
    assert report.version == 3
    assert ledger.snapshot("a") == {"other": "theirs", "k1": "fix1"}


def test_another_writer_landing_the_same_change_first_makes_it_a_duplicate_not_an_empty_commit(tmp_path):
    ledger, agg = another_writer(tmp_path, {}, {"k1": "fix1"}, message="theirs")  # the very change being judged
    report = agg.step([diff("d1", 1, {"k1": "fix1"}, tasks=["t1"])], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "duplicate"}
    assert "another writer committed the same change first, in version 2" in report.outcomes[0].reason
    assert ledger.head() == 2 and ledger.log()[0].message.startswith("theirs")  # no empty commit of ours on top


def test_another_writer_appending_where_the_candidate_appends_is_stacked_under(tmp_path):
    ledger, agg = another_writer(tmp_path, {"doc": "x\n"}, {"doc": "x\ntheirs\n"})  # where the judged diff appends
    report = agg.step([diff("d1", 1, {"doc": "x\nfix1\n"}, before={"doc": "x\n"}, tasks=["t1"])], step=0,
                      sample=TASKS)
    assert kinds(report) == {"d1": "committed"}
    assert ledger.snapshot("a") == {"doc": "x\ntheirs\nfix1\n"}


def test_a_change_carried_onto_another_writers_head_must_still_parse(tmp_path):
    # each edit parses, their merge does not: theirs removes the try's except, ours its finally
    base = "x = 1\n\ntry:\n    f()\nexcept E:\n    pass\n# keep\nfinally:\n    g()\n"
    theirs = base.replace("except E:\n    pass\n", "")
    ours = base.replace("x = 1\n", "x = 1  # fix1\n").replace("finally:\n    g()\n", "")
    ledger, agg = another_writer(tmp_path, {"f.py": base}, {"f.py": theirs})
    report = agg.step([diff("d1", 1, {"f.py": ours}, before={"f.py": base}, tasks=["t1"])], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "conflict_lost"}
    reason = report.outcomes[0].reason
    assert "another writer moved dev to version 2" in reason and "'f.py' would not compile" in reason
    assert ledger.head() == 2 and ledger.snapshot("a") == {"f.py": theirs}


def test_another_writer_on_the_same_text_is_a_reported_conflict(tmp_path):
    ledger, agg = another_writer(tmp_path, {"doc": "x\n"}, {"doc": "theirs\n"})
    report = agg.step([diff("d1", 1, {"doc": "fix1\n"}, before={"doc": "x\n"}, tasks=["t1"])], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "conflict_lost"}
    assert "another writer" in report.outcomes[0].reason
    assert ledger.snapshot("a") == {"doc": "theirs\n"}


@pytest.mark.parametrize("after", [None, "fix1"])
def test_change_already_at_head_is_duplicate(tmp_path, after):
    state = {"k": "fix1"} if after else {}
    _, agg = make(tmp_path, state)
    report = agg.step([diff("d1", 1, {"k": after}, before=state)], step=0, sample=TASKS)
    assert kinds(report) == {"d1": "duplicate"}


def test_staleness_is_reported_once_for_every_diff_and_matches_the_trailer(tmp_path):
    ledger, agg = make(tmp_path, {})
    agg.step([diff("d0", 1, {"k0": "fix0"}, tasks=["t0"])], step=0, sample=TASKS)
    report = agg.step([diff("late", 1, {"k1": "fix1"}, tasks=["t1"]), diff("bad", 1, {"../x": "y"}),
                       diff("fresh", 2, {"k3": "fix3"}, tasks=["t3"])], step=1, sample=TASKS)
    assert report.staleness == {"late": 1, "bad": 1, "fresh": 0}
    assert ledger.log(limit=1)[0].trailers["Staleness"] == "1,0"


def test_a_gated_change_must_leave_no_oracle_task_worse(tmp_path):
    gov = Governance(blast_radius={"agents/*": "L1"})
    _, agg = make(tmp_path, {"base": "fix0 fix2 fix4 fix6 fix8"}, governance=gov)
    agg.oracle = TASKS  # "harm" breaks the even tasks: a test on odd tasks cannot see it, the oracle does
    many = " ".join(f"fix{i}" for i in range(10))
    report = agg.step([diff("harmful", 1, {"agents/y.md": many + " harm"}, tasks=["t1"])], step=0, sample=TASKS[1::2])
    assert kinds(report) == {"harmful": "rejected_by_test"}
    assert "no held-out task worse; it makes 5 worse (t0, t2, t4, t6, t8)" in report.outcomes[0].reason
    report = agg.step([diff("clean", 1, {"agents/y.md": many}, tasks=["t1"])], step=1, sample=TASKS)
    assert kinds(report) == {"clean": "committed"}


@pytest.mark.parametrize("answer", [1, "yes", None])
def test_an_approver_that_answers_neither_true_nor_false_stops_the_run_saying_so(answer):
    """A broken approver is the caller's contract broken, as a reward that returns no number is:
    the run stops with the error, and the change it was asked about does not land."""
    from agentdescent import evolve
    from agentdescent.testing import RouterReflector, route, route_reward, router_tasks

    result = evolve(router_tasks(0, signals=1), route_reward, run=route, propose=RouterReflector(), rounds=2,
                    blast_radius={"*": "L1"}, policies=Policies(approve=lambda change: answer))
    assert f"({type(answer).__name__}), not True or False: it must return True to approve" in result.error
    assert result.state == result.initial_state and not result.outcomes().get("committed")


@pytest.mark.parametrize("answer, kind", [(True, "committed"), (False, "declined"), (RuntimeError, "declined")])
def test_a_gated_change_lands_only_when_approved(tmp_path, answer, kind):
    asked = []

    def approve(change):
        asked.append(change)
        if answer is RuntimeError:
            raise RuntimeError("the queue is down")
        return answer

    _, agg = make(tmp_path, {"notes.md": "fix0\n"}, governance=Governance(blast_radius={"agents/*": "L1"}))
    agg.approve, agg.oracle = approve, TASKS
    many = " ".join(f"fix{i}" for i in range(10))
    free = diff("free", 1, {"notes.md": "fix0 fix3\n"}, before={"notes.md": "fix0\n"}, tasks=["t3"])
    report = agg.step([diff("gated", 1, {"agents/y.md": many}, tasks=["t1"]), free], step=0, sample=TASKS)
    assert kinds(report)["gated"] == kind and kinds(report)["free"] == "committed"
    [change] = asked  # only the gated change is put to the approver
    assert change.keys == ["agents/y.md"] and change.before == {"agents/y.md": None} and change.after["agents/y.md"] == many
    if kind != "committed":
        said = f"the approver declined L1 change {change.id}" if answer is False else f"so L1 change {change.id} is declined"
        assert said in next(o.reason for o in report.outcomes if o.diff_id == "gated")


def test_gated_changes_of_one_file_approved_each_alone_never_land_as_a_merge_no_one_was_shown(tmp_path):
    """Two diffs that each only add lines to one gated file are separate components: each passed
    alone and was approved as head plus its own lines; their merge, a text no approval showed, was
    what landed. The one with the better evidence is put to the approver and lands as it was shown."""
    asked = []

    def approve(change):
        asked.append(change)
        return True

    head = "fix0\n"
    _, agg = make(tmp_path, {"agents/y.md": head}, governance=Governance(blast_radius={"agents/*": "L1"}))
    agg.approve, agg.oracle = approve, TASKS
    one = diff("one", 1, {"agents/y.md": head + "fix1 fix2 fix3 fix4 fix5\n"}, before={"agents/y.md": head},
               tasks=["t1", "t3", "t5"])
    two = diff("two", 1, {"agents/y.md": head + "fix6 fix7 fix8 fix9\n"}, before={"agents/y.md": head}, tasks=["t7"])
    report = agg.step([one, two], step=0, sample=TASKS)
    [shown] = [c.after["agents/y.md"] for c in asked]  # the one with the better evidence; the other is not asked
    assert shown == head + "fix1 fix2 fix3 fix4 fix5\n" == agg.ledger.snapshot("a")["agents/y.md"]
    assert kinds(report) == {"one": "committed", "two": "conflict_lost"}
    assert "another L1 change of this step to agents/y.md lands (one): one change a file is approved" in report.outcomes[1].reason
