"""The oracle gate: the stricter bar an L1 (gated) change passes after the normal test.

Harness code, agent definitions and scripts change what every later rollout does, so a change
that touches one is judged alone (`gated_test`): at the stricter bar on its evidence and a full
sample, then it must leave no task of the oracle set (the run's held-out tasks) worse than head
does, and then, when the run has an approver (a person, or the run store's queue), be approved.
An approver is asked about one change once: what it declined, or left unanswered in time, is
remembered for the run (`Judge.declined`, by `digest`), and the same change proposed again is
refused before it is judged (`declined_before`). What it leaves out: which keys are gated
(governance) and the test of the rest (accept).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from agentdescent.artifacts.state import State, apply
from agentdescent.errors import UserError
from agentdescent.quoting import described, quoted
from agentdescent.step.changes import Approve, Component, Declined, GatedChange, Scorer
from agentdescent.step.policies import Verdict
from agentdescent.step.trial import Trial, unique
from agentdescent.types import Task


def oracle_gate(candidates: Sequence[State], head: State, oracle: Sequence[Task], score: Scorer) -> list[str | None]:
    """For each candidate, why it fails the oracle (the tasks it makes worse), or None when it
    passes; all of them and head are scored in one wave."""
    if not oracle or not candidates:
        return [None] * len(candidates)
    head_row, *rows = score([(head, oracle), *((candidate, oracle) for candidate in candidates)])
    return [_worse(oracle, row, head_row) for row in rows]


def _worse(oracle: Sequence[Task], row: Sequence[float], head_row: Sequence[float]) -> str | None:
    worse = [task.id for task, new, old in zip(oracle, row, head_row) if new < old]
    if not worse:
        return None
    shown = ", ".join(worse[:5]) + (f" and {len(worse) - 5} more" if len(worse) > 5 else "")
    return f"an L1 change must leave no held-out task worse; it makes {len(worse)} worse ({shown})"


def approval(change: GatedChange, approve: Approve | None) -> tuple[str | None, bool]:
    """Why the approver declined `change` (None when it is approved, or nobody has to approve), and
    whether the run holds to that no: a person's no and no answer in time are remembered; after a
    failed approver or a cancelled wait, the change proposed again is asked about again.
    An answer that is neither True nor False is a broken approver: `UserError`, not a decline."""
    if approve is None:
        return None, False
    try:
        approved = approve(change)
    except Declined as exc:
        return f"{exc}, so L1 change {change.id} is declined", exc.lasting
    except Exception as exc:  # a broken hook declines; it does not end the run
        return f"the approver failed ({described(exc)}), so L1 change {change.id} is declined", False
    if not isinstance(approved, bool):
        raise UserError(f"the approver returned {quoted(approved, 40)} ({type(approved).__name__}), not True or False: "
                        "it must return True to approve an L1 change and False to decline it")
    return (None, False) if approved else (f"the approver declined L1 change {change.id}", True)


def digest(after: Mapping[str, str | None], head_state: State) -> str:
    """What an approver is shown of a change, as a short digest: each key it touches, with head's
    text and the new one. The same new text on another head (the key changed since) is another change."""
    texts = [[key, head_state.get(key), after[key]] for key in sorted(after)]
    return hashlib.sha256(json.dumps(texts).encode("ascii")).hexdigest()[:32]


def declined_before(trial: Trial, components: Sequence[Component]) -> list[Component]:
    """`components` but those an approver declined before (`Judge.declined`): each is refused,
    saying when and why, neither judged nor asked about again."""
    remembered = trial.judge.declined
    if not remembered:
        return list(components)
    left = []
    for comp in components:
        why = remembered.get(digest(comp.after, trial.head_state))
        if why is None:
            left.append(comp)
        else:
            keys = sorted(comp.after)
            named = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
            trial.decline([comp], f"an earlier round proposed the same change to {named}, and {why}: it is neither "
                                  "judged nor asked about again")
    return left


def gated_test(trial: Trial, gated: list[Component], evidence: Mapping[Component, list[Task]]) -> list[Component]:
    """The gated components that pass alone: the test at the stricter bar on their evidence and the
    first `size` probes, then the oracle (no held-out task worse) and the approver, best gain first.
    Those the approver declines are `declined`, and those it approves go in `Trial.approved` with
    the id of the change it was asked about. One change a file is approved: each is shown as head
    with its own change, so two that change one file (each only adding lines) would land as a merge
    no approval showed; once one is approved, the others of its files lose to it
    (`conflict_lost`: a later head may take them), and the approver is not asked."""
    if not gated:
        return []
    probes = trial.probes[: trial.policy.size]
    sets = [unique([*evidence[comp], *probes]) for comp in gated]
    rows = trial.score([(apply(trial.head_state, comp.after), ts) for comp, ts in zip(gated, sets)])
    passing: list[tuple[Component, Verdict, float]] = []
    for comp, ts, row in zip(gated, sets, rows):
        verdict = trial.test([t.id for t in ts], row, [trial.head[t.id] for t in ts], gated=True)
        if verdict.accepted:
            passing.append((comp, verdict, sum(r - trial.head[t.id] for t, r in zip(ts, row))))
        else:
            trial.reject([comp], f"rejected: {verdict.reason}")
    judge = trial.judge
    failures = oracle_gate([apply(trial.head_state, comp.after) for comp, _, _ in passing], trial.head_state,
                           judge.oracle, judge.score)
    passed: list[Component] = []
    for (comp, verdict, _), failure in sorted(zip(passing, failures), key=lambda pair: -pair[0][2]):
        beside = next((p for p in passed if p.after.keys() & comp.after.keys()), None)
        if failure is None and beside is not None:
            trial.lose([comp], f"passed the test ({verdict.reason}), but another L1 change of this step to "
                                 f"{min(beside.after.keys() & comp.after.keys())} lands ({beside.changes[0].diff.id}): "
                                 "one change a file is approved, so that what lands is what was shown")
            continue
        if failure:
            trial.reject([comp], f"passed the test ({verdict.reason}) but not the L1 gate: {failure}")
            continue
        change = _gated_change(comp, verdict, trial.head_state, judge.oracle)
        why, lasting = approval(change, judge.approve)
        if why is not None:
            trial.decline([comp], f"{why}; it passed the test ({verdict.reason})")
            if lasting:
                judge.declined[digest(comp.after, trial.head_state)] = why
            continue
        passed.append(comp)
        if judge.approve is not None:
            trial.approved.update((c.diff.id, change.id) for c in comp.changes)
    return [comp for comp in gated if comp in passed]


def _gated_change(comp: Component, verdict: Verdict, head_state: State, oracle: Sequence[Task]) -> GatedChange:
    after = comp.after
    return GatedChange(
        diff_ids=[c.diff.id for c in comp.changes], keys=sorted(after),
        before={k: head_state.get(k) for k in after}, after=dict(after),
        rationale="\n".join(c.diff.evidence.rationale for c in comp.changes),
        verdict=f"{verdict.reason}; no task of {len(oracle)} held out is worse",
    )
