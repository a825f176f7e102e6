"""Events are plain data: each one written as a JSON line reads back as the same event."""

from __future__ import annotations

import json

from agentdescent import events as ev
from agentdescent.types import Diff, Edit, EvidenceCard, Outcome


def test_every_kind_of_event_reads_back_from_its_json_line():
    diff = Diff(id="d1", artifact_id="a", base_version=2, edits=[Edit(key="k", before="x", after=None)],
                evidence=EvidenceCard(task_ids=["t1"], rewards=[0.0], rationale="why"), author="w0")
    samples = [
        ev.RunStarted(rounds=3, n_workers=2, train=8, held_out=4, version=1, ledger="/l", temporary=True,
                      continued_from=None, resumed_round=2),
        ev.Warned(message="careful"),
        ev.RoundStarted(round=0, version=1),
        ev.DiffOutcome(round=0, outcome=Outcome(diff_id="d1", kind="committed", reason="landed", version=2), diff=diff),
        ev.DiffOutcome(round=0, outcome=Outcome(diff_id="d2", kind="invalid", reason="no rule")),
        ev.Committed(round=0, version=2, diff_ids=("d1",)),
        ev.Evaluated(round=0, version=2, held_out_reward=0.5, promoted=True, best_reward=0.5),
        ev.Spent(calls=11, tokens=420),
        ev.RoundEnded(round=0, calls=12),
        ev.RunEnded(reason="ran all 3 rounds", final_reward=0.5),
    ]
    assert {type(e) for e in samples} == set(ev.EVENTS.values())
    for event in samples:
        line = json.dumps(ev.to_json(event))
        assert ev.from_json(json.loads(line)) == event
