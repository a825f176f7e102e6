"""The approver's say over L1 changes: asked once about a change, its no kept, its yes recorded."""

from __future__ import annotations

import pytest

from agentdescent import Policies, evolve
from agentdescent import events as ev
from agentdescent.engine.calls.cancel import CancelToken
from agentdescent.governance import Governance
from agentdescent.step.changes import Declined
from agentdescent.testing import RouterReflector, route, route_reward, router_tasks
from tests.test_aggregator import TASKS, diff, kinds, make, score

MANY = " ".join(f"fix{i}" for i in range(10))  # passes the gated bar: it fixes every task


def gated(tmp_path, answer):
    """An aggregator whose `agents/*` keys are L1, and an approver that answers `answer` (an
    exception is raised); the changes it was asked about, and the states each step scored."""
    asked, scored = [], []

    def approve(change):
        asked.append(change)
        if isinstance(answer, BaseException):
            raise answer
        return answer(change) if callable(answer) else answer

    def counting(jobs):
        scored.extend(state for state, tasks in jobs if tasks)
        return score(jobs)

    _, agg = make(tmp_path, {"notes.md": "fix0\n"}, governance=Governance(blast_radius={"agents/*": "L1"}),
                  score_fn=counting)
    agg.approve, agg.oracle = approve, TASKS
    return agg, asked, scored


def y(id_, text, **fields):
    return diff(id_, 1, {"agents/y.md": text}, tasks=["t1"], **fields)


@pytest.mark.parametrize("answer, said", [
    (False, "the approver declined L1 change {id}"),
    (Declined("no answer came within host_timeout=3 s"), "no answer came within host_timeout=3 s, so L1 change {id} is declined"),
])
def test_a_change_the_approver_declined_is_refused_when_proposed_again_unjudged_and_unasked(tmp_path, answer, said):
    agg, asked, scored = gated(tmp_path, answer)
    first = agg.step([y("first", MANY)], step=0, sample=TASKS)
    [change] = asked
    said = said.format(id=change.id)
    assert kinds(first) == {"first": "declined"} and first.outcomes[0].reason.startswith(f"{said}; it passed the test (")
    scored.clear()
    again = agg.step([y("again", MANY)], step=1, sample=TASKS)  # byte for byte the same change, another diff
    assert kinds(again) == {"again": "declined"} and len(asked) == 1
    assert not any("agents/y.md" in state for state in scored)  # neither its evidence, the gated test nor the oracle
    assert again.outcomes[0].reason == (f"an earlier round proposed the same change to agents/y.md, and {said}: it is "
                                        "neither judged nor asked about again")
    other = agg.step([y("other", MANY + " fix1")], step=2, sample=TASKS)  # another text is another change
    assert len(asked) == 2 and kinds(other) == {"other": "declined"} and asked[1].id != change.id


@pytest.mark.parametrize("answer", [Declined("the run was cancelled while it waited", lasting=False),
                                    RuntimeError("the queue is down")])
def test_a_change_nobody_decided_on_is_asked_about_again(tmp_path, answer):
    """A run cancelled while it waited, or an approver that failed, said no one's no: the same
    change proposed again is judged and asked about again."""
    agg, asked, _ = gated(tmp_path, answer)
    for step in range(2):
        report = agg.step([y(f"d{step}", MANY)], step=step, sample=TASKS)
        assert kinds(report) == {f"d{step}": "declined"} and len(asked) == step + 1
    assert f"so L1 change {asked[1].id} is declined; it passed the test" in report.outcomes[0].reason


def test_a_change_declined_on_one_head_is_asked_about_again_on_another(tmp_path):
    """The same new text of a file, once the file changed at head, is another change to approve."""
    agg, asked, _ = gated(tmp_path, lambda change: "ok" in change.after["agents/y.md"])
    assert kinds(agg.step([y("all", MANY)], step=0, sample=TASKS)) == {"all": "declined"}
    half = " ".join(f"fix{i}" for i in range(1, 6)) + " ok"
    assert kinds(agg.step([y("half", half)], step=1, sample=TASKS)) == {"half": "committed"}
    again = agg.step([diff("all2", 2, {"agents/y.md": MANY}, before={"agents/y.md": half}, tasks=["t9"])], step=2,
                     sample=TASKS)
    assert [c.before["agents/y.md"] for c in asked] == [None, None, half] and kinds(again) == {"all2": "declined"}
    assert "an earlier round" not in again.outcomes[0].reason


def test_an_approved_change_says_so_in_its_outcome_and_in_its_commit(tmp_path):
    agg, asked, _ = gated(tmp_path, True)
    free = diff("free", 1, {"notes.md": "fix0 fix3\n"}, before={"notes.md": "fix0\n"}, tasks=["t3"])
    assert kinds(agg.step([free], step=0, sample=TASKS)) == {"free": "committed"} and not asked
    assert "Approved" not in agg.ledger.log(limit=1)[0].trailers  # no approver was asked about this commit
    more = diff("more", 2, {"notes.md": "fix0 fix3 fix5\n"}, before={"notes.md": "fix0 fix3\n"}, tasks=["t5"])
    report = agg.step([y("gated", MANY), more], step=1, sample=TASKS)
    [change] = asked
    reasons = {o.diff_id: o.reason for o in report.outcomes}
    assert kinds(report) == {"gated": "committed", "more": "committed"}
    assert f"; approved as L1 change {change.id}" in reasons["gated"] and "approved" not in reasons["more"]
    assert agg.ledger.log(limit=1)[0].trailers["Approved"] == change.id and change.diff_ids == ["gated"]


def router_run(store, approve, **options):
    return evolve(router_tasks(0, signals=1), route_reward, run=route, propose=RouterReflector(), rounds=4,
                  blast_radius={"*": "L1"}, policies=Policies(approve=approve), store=store, seed=1, **options)


def test_a_run_asks_about_each_change_once_and_its_outcomes_say_it_was_declined(tmp_path):
    asked = []

    def approve(change):
        asked.append(repr(sorted(change.after.items())))
        return False

    result = router_run(tmp_path / "ledger", approve)
    assert asked and len(asked) == len(set(asked)), asked
    assert result.outcomes().get("declined", 0) > len(asked)  # proposed again, and refused unasked
    assert "rejected_by_test" not in result.outcomes() or all(
        "L1 change" not in o.reason for o in result.outcome_list if o.kind == "rejected_by_test")


def test_a_resumed_run_does_not_ask_again_about_a_change_declined_before_it_stopped(tmp_path):
    asked = []

    def approve(change):
        asked.append(repr(sorted(change.after.items())))
        return False

    token = CancelToken()

    def cancel_after_round_0(event):
        if isinstance(event, ev.RoundEnded) and event.round == 0:
            token.cancel("the test asked")

    stopped = router_run(tmp_path / "ledger", approve, stop=[token], on_event=cancel_after_round_0)
    assert stopped.error == "cancelled" and asked
    before = set(asked)
    resumed = router_run(tmp_path / "ledger", approve)
    assert resumed.error is None and len(asked) == len(set(asked)), asked
    again = [o for o in resumed.outcome_list if "an earlier round proposed the same change" in o.reason]
    assert again and before
