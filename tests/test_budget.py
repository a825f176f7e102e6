"""A budget's last calls measure what the rounds committed last: the rounds leave what measuring the
held-out set takes (`engine.calls.budget`), so a run whose budget runs out after a commit still
measures it, and keeps it when it wins; where even that falls short, the result names the version
left unmeasured instead of reading as a run that changed nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentdescent import Budget, Task, events, evolve, scripted
from agentdescent.engine.calls.budget import Allowance
from agentdescent.engine.loop.stopping import Progress
from agentdescent.errors import BudgetSpent
from agentdescent.testing import RouterReflector, route, route_reward, router_tasks
from agentdescent.types import Rollout, Spend
from agentdescent.usage import Usage
from tests import keyword_domain as domain
from tests.doubles import year_program
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]


def ran(allowance: Allowance, usage: Usage, count: int, *, calls: int = 1, tokens: int = 0) -> None:
    for _ in range(count):
        allowance.take()
        usage.count_rollout(Rollout(task=Task(id="t", prompt=""), output="", reward=0.0,
                                    spend=Spend(calls=calls, input_tokens=tokens)), "validate")


def test_the_rounds_leave_the_calls_measuring_the_held_out_set_takes_and_the_end_spends_them():
    usage = Usage()
    allowance = Allowance(usage, max_calls=10, max_tokens=None)
    ran(allowance, usage, 5)
    allowance.keep(4)  # four held-out tasks: the measurement at the end
    ran(allowance, usage, 1)
    with pytest.raises(BudgetSpent, match=r"\(6 of max_calls=10, the other 4 kept for measuring the last version"):
        allowance.take()
    assert allowance(Progress(), usage).startswith("the call budget is spent (6 of max_calls=10, the other 4 kept")
    allowance.release()
    ran(allowance, usage, 4)
    with pytest.raises(BudgetSpent, match=r"\(10 of max_calls=10\)$"):
        allowance.take()
    assert usage.calls == 10


def test_a_unit_landing_while_the_budget_is_asked_is_counted_once_and_whole(monkeypatch):
    """A landing unit adds to the rollouts, then to the calls billed: the budget read between the two
    took it for back and unpaid, and let one more start than max_calls allows."""
    halfway, resume = threading.Event(), threading.Event()
    add = Usage._add

    def add_slowly(self, **counts):
        if "rollouts" in counts:  # the rollout is counted, its calls not yet
            add(self, rollouts=counts.pop("rollouts"))
            halfway.set()
            resume.wait(timeout=10)
        add(self, **counts)

    monkeypatch.setattr(Usage, "_add", add_slowly)
    usage = Usage()
    allowance = Allowance(usage, max_calls=1, max_tokens=None)
    lands = threading.Thread(target=ran, args=(allowance, usage, 1))
    lands.start()
    assert halfway.wait(timeout=10)
    asked: list[BaseException | None] = []
    asks = threading.Thread(target=lambda: asked.append(refused_or_none(allowance)))
    asks.start()
    asks.join(timeout=0.5)  # the budget waits for the landing unit, or reads it half counted
    resume.set()
    lands.join()
    asks.join()
    assert isinstance(asked[0], BudgetSpent) and "(1 of max_calls=1)" in str(asked[0])
    assert usage.calls == 1


def refused_or_none(allowance: Allowance) -> BaseException | None:
    try:
        allowance.take()
    except BudgetSpent as refused:
        return refused
    return None


def test_what_is_kept_back_is_priced_at_what_a_unit_cost_so_far_in_calls_and_in_tokens():
    usage = Usage()
    allowance = Allowance(usage, max_calls=100, max_tokens=None)
    ran(allowance, usage, 4, calls=3)  # an agent that asks its model three times a rollout
    allowance.keep(4)
    assert allowance(Progress(), usage) is None
    ran(allowance, usage, 25, calls=3)  # 87 calls: the four rollouts kept back would take 12 more
    assert allowance(Progress(), usage) is None
    ran(allowance, usage, 1, calls=3)
    assert "(90 of max_calls=100, the other 10 kept" in allowance(Progress(), usage)
    usage = Usage()
    allowance = Allowance(usage, max_calls=None, max_tokens=1000)
    ran(allowance, usage, 8, tokens=100)
    allowance.keep(2)  # about 200 tokens, at 100 a unit so far
    assert allowance(Progress(), usage) == ("the token budget is spent (800 of max_tokens=1000 when the rounds' share "
                                            "ran out, about 200 kept for measuring the last version on the held-out tasks)")
    allowance.release()
    assert allowance(Progress(), usage) is None
    ran(allowance, usage, 2, tokens=150)  # tokens are known once a call is back: the cap is passed, and the figure says when
    assert allowance(Progress(), usage) == "the token budget is spent (1100 of max_tokens=1000 when the cap was hit)"


def test_every_commit_a_budget_ends_the_rounds_after_is_measured_and_kept_when_it_wins():
    """Swept over the budgets at which the first round's commits land: at 140 and 148 calls the
    budget ran out before they were measured on the held-out set, and the result was the version
    before them (its reward and artifact the start's, no warning) while the ledger's dev held three
    committed diffs."""
    committed = []
    for max_calls in range(136, 176, 4):
        told = []
        result = evolve(router_tasks(0, signals=1), route_reward, run=route, propose=RouterReflector(), rounds=6,
                        n_workers=4, budget=Budget(max_calls=max_calls), on_event=told.append)
        assert "call budget is spent" in result.stop_reason and result.usage.calls <= max_calls
        with result.ledger as ledger:
            head = ledger.head()
        if head == result.initial_version:
            continue  # too little for the round's test: it committed nothing
        committed.append(max_calls)
        assert any(isinstance(e, events.Evaluated) and e.version == head and not e.partial for e in told), max_calls
        assert result.version == head and result.final_reward > result.initial_reward, max_calls  # measured, it won
        assert not result.warnings, max_calls
    assert len(committed) >= 4, committed


def test_a_version_the_budget_kept_back_cannot_measure_is_named_with_where_it_is():
    """A learned version whose rollouts ask the model six times costs more to measure than the start
    did, so what was kept back falls short: the result says so rather than read as no change."""
    model = scripted(lambda prompt: "ok")
    tasks, reward, run, propose = year_program()

    def costly(rendered, task):
        for _ in range(6 if "year" in rendered else 1):
            model(task.prompt)
        return run(rendered, task)

    result = evolve(tasks, reward, run=costly, propose=propose, rounds=10, n_workers=3, max_concurrency=1,
                    budget=Budget(max_calls=112))
    with result.ledger as ledger:
        head = ledger.head()
    assert head == 2 and result.version == 1 and result.unmeasured == 2 and result.error is None
    assert result.final_reward == result.initial_reward
    assert result.usage.calls <= 112 + 5  # the unit running when the cap was hit, past its first call
    [warning] = result.warnings
    assert warning.startswith("version 2 was committed but never measured on the held-out tasks (the budget ran out "
                              "first), so the result is version 1, the best measured: version 2 is the head of the "
                              f"ledger's dev branch (git -C {result.ledger_path} log -p dev shows its commits)")


def test_status_show_and_accept_name_the_version_a_run_committed_and_never_measured(service, tmp_path):
    """Through the run store: status said "held-out 0.000 -> 0.000", show "no change: the best version
    is the target as it was" and accept wrote nothing, while the ledger's dev held the commit."""
    spec = domain.spec(tmp_path, agent="python:tests.keyword_domain:costly_answer", n_workers=1, max_concurrency=1,
                       budget={"max_calls": 165})
    run = service.start(spec).run_id
    done = wait(service, run)
    said = "version 2 was committed but never measured on the held-out tasks"
    assert done.state == "finished" and f"held-out 0.000 -> 0.000; {said} (see the warnings)" in done.message, done
    assert [w for w in done.warnings if w.startswith(f"{said} (the budget ran out first), so the result is version 1")]
    shown = service.show(run)
    assert shown.diff == "" and shown.version == 1 and shown.unmeasured.startswith(said)
    assert f"git -C {service.store.get(run).ledger} log -p dev" in shown.unmeasured
    printed = subprocess.run([sys.executable, "-m", "agentdescent", "show", run], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, env={**os.environ, "COLUMNS": "400"}).stdout
    assert f"no measured change: {said}" in printed and "no change: the best version" not in printed
    accepted = service.accept(run, dry_run=True)
    assert accepted.written == [] and "version 2 was committed but never measured" in accepted.message
