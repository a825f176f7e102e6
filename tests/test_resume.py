"""A run that stops early (cancelled, Ctrl-C, killed) continues where it stopped on the same store:
same rounds, same commits, nothing paid for twice."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from agentdescent import Amortized, AppendRules, EvolveResult, Parallelism, Task, evolve
from agentdescent import events as ev
from agentdescent.config import Policies
from agentdescent.engine.calls.cancel import CancelToken
from agentdescent.engine.persist.checkpoint import Checkpoint, RunFiles
from agentdescent.ledger import Ledger
from agentdescent.step.policies import BetaAcceptance
from agentdescent.testing import FILLERS, SIGNALS, route, route_reward, router_tasks, rule_text
from agentdescent.types import Tried

HERE = Path(__file__).parent
ROOT = HERE.parent
RULES = 6


def keyword_tasks() -> list[Task]:
    """Four tasks for each of RULES keywords; each is solved by one rule naming its keyword."""
    return [Task(id=f"t{i:02d}", prompt=f"request {i}", gold=f"k{i % RULES}") for i in range(4 * RULES)]


def keyword_run(rendered: str, task: Task) -> str:
    return task.gold if f"rule {task.gold}." in rendered else "?"


def keyword_reward(task: Task, output: str) -> float:
    return float(output == task.gold)


class OneRulePerTurn:
    """A batch reflector: one rule per worker turn, for its first failure, so with one worker each
    round commits exactly one rule and a run needs exactly RULES commits, whatever order it meets
    the failures in."""

    def __call__(self, rendered, task, output, reward):  # pragma: no cover - batch is used
        return f"rule {task.gold}."

    def batch(self, rendered, rollouts):
        return f"rule {rollouts[0].task.gold}."


def keyword_run_options(store: Path, **options) -> dict:
    return dict(run=keyword_run, propose=OneRulePerTurn(), strategy=AppendRules(), rounds=RULES + 6, n_workers=1,
                seed=3, store=store, target_reward=1.0, parallelism=Parallelism(reissue_after=None), **options)  # calls compared exactly


def commits(store: Path) -> list[tuple[str, str]]:
    """(subject, diff ids) of each step's commit, oldest first."""
    with Ledger(store) as ledger:
        return [(r.message, r.trailers["Diffs"]) for r in reversed(ledger.log()) if r.trailers.get("Round", "").isdigit()]


def cancel_at(token: CancelToken, event_type: type, round_: int):
    def on_event(event) -> None:
        if isinstance(event, event_type) and getattr(event, "round", None) == round_:
            token.cancel("the test asked")
    return on_event


def test_a_cancelled_run_resumes_at_its_next_round_with_the_same_commits(tmp_path):
    whole = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(tmp_path / "whole"))
    assert whole.error is None and whole.final_reward == 1.0 and len(commits(tmp_path / "whole")) == RULES

    token = CancelToken()
    store = tmp_path / "cut"
    stopped = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store), stop=[token],
                     on_event=cancel_at(token, ev.RoundEnded, 1))
    assert stopped.error == "cancelled" and stopped.stop_reason.startswith("cancelled")
    assert [h.round for h in stopped.history] == [0, 1]

    seen: list = []
    resumed = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store), on_event=seen.append)
    started = next(e for e in seen if isinstance(e, ev.RunStarted))
    assert started.resumed_round == 2
    assert resumed.error is None and resumed.final_reward == 1.0
    assert [h.round for h in resumed.history] == [h.round for h in whole.history]
    assert commits(store) == commits(tmp_path / "whole")  # the same steps, in the same order
    assert resumed.initial_reward == whole.initial_reward and resumed.initial_version == whole.initial_version
    assert resumed.usage.calls == whole.usage.calls  # nothing paid for twice, nothing forgotten


def test_cancel_wakes_a_run_blocked_in_a_long_wave(tmp_path):
    release = threading.Event()

    def stuck_run(rendered, task):
        release.wait(60)  # a model that does not answer
        return "?"

    token = CancelToken()
    threading.Timer(0.5, token.cancel).start()
    began = time.monotonic()
    try:
        result = evolve(keyword_tasks(), keyword_reward, run=stuck_run, propose=OneRulePerTurn(), rounds=3, n_workers=2,
                        store=tmp_path / "ledger", stop=[token])
    finally:
        release.set()
    assert time.monotonic() - began < 30  # not the 60 s the stuck calls would take
    assert result.error == "cancelled" and result.stop_reason == "cancelled"
    children = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "args="], capture_output=True, text=True).stdout
    assert "git cat-file" not in children  # the ledger's git processes were closed
    with Ledger(tmp_path / "ledger") as ledger:
        assert ledger.has_artifact("artifact")


def test_a_finished_run_is_not_resumed_and_a_run_of_other_settings_is_warned_about(tmp_path):
    store = tmp_path / "ledger"
    evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store))
    seen: list = []
    evolve(keyword_tasks(), keyword_reward, **{**keyword_run_options(store), "rounds": 1}, on_event=seen.append)
    started = next(e for e in seen if isinstance(e, ev.RunStarted))
    assert started.resumed_round is None and started.continued_from is not None

    token, store = CancelToken(), tmp_path / "cut"
    evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store), stop=[token],
           on_event=cancel_at(token, ev.RoundStarted, 0))
    seen.clear()
    other = evolve(keyword_tasks()[:-4], keyword_reward, **keyword_run_options(store), on_event=seen.append)
    warnings = [e.message for e in seen if isinstance(e, ev.Warned)]
    assert any("unfinished run with other settings" in w for w in warnings)
    assert other.warnings == warnings


def test_a_run_whose_every_rollout_fails_stops_and_names_the_error(tmp_path):
    def broken(rendered, task):
        raise ConnectionError("the model server refused the connection")

    seen: list = []
    result = evolve(keyword_tasks(), keyword_reward, run=broken, propose=OneRulePerTurn(), rounds=2, n_workers=2,
                    on_event=seen.append)
    assert "every rollout of the held-out measurement at the start failed" in result.error
    assert "refused the connection" in result.error and result.history == []
    assert not [e for e in seen if isinstance(e, ev.Warned)] and result.warnings == []  # the error says it


def test_a_journal_line_cut_short_by_a_kill_is_dropped(tmp_path):
    store = tmp_path / "ledger"
    token = CancelToken()
    evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store), stop=[token],
           on_event=cancel_at(token, ev.RoundEnded, 0))
    files = RunFiles(store)
    with files.rollouts_path.open("a", encoding="utf-8") as journal:
        journal.write('{"state": "abc", "task": "t0')  # what a kill in the middle of a write leaves
    resumed = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store))
    assert resumed.error is None and resumed.final_reward == 1.0
    lines = files.rollouts_path.read_text(encoding="utf-8").splitlines()
    assert all(line.endswith("}") for line in lines)


KILL_POINTS = [
    ("rollout", 7),  # inside the 7th rollout (the first round's worker turn)
    ("Committed", 2),  # the third round's commit is in the ledger, its checkpoint is not
    ("RoundStarted", 3),  # just after a checkpoint
]


@pytest.mark.parametrize("where,when", KILL_POINTS)
def test_a_run_killed_with_sigkill_resumes_with_the_commits_it_would_have_had(tmp_path, where, when):
    store = tmp_path / "ledger"
    child = subprocess.run([sys.executable, str(HERE / "resume_child.py"), str(store), where, str(when)],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    before = commits(store)
    resumed = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store))
    after = commits(store)
    assert resumed.error is None and resumed.final_reward == 1.0
    assert after[: len(before)] == before  # nothing committed was lost
    assert len(after) == RULES  # and nothing was committed twice
    rules = [diff for _, diffs in after for diff in diffs.split(",")]
    assert len(rules) == len(set(rules)) == RULES
    assert len({o.diff_id for o in resumed.outcome_list}) == len(resumed.outcome_list)


def test_rollouts_in_flight_when_a_run_is_cancelled_wait_in_the_queue_and_run_first_on_resume(tmp_path):
    """Cancelled mid-wave: what was in flight goes to the resume queue in the run's folder, and the
    resumed run runs it before anything else, counting it as resumed."""
    store, token, slow = tmp_path / "ledger", CancelToken(), threading.Event()
    slow.set()

    def run(rendered, task):
        if slow.is_set():
            time.sleep(0.3)  # long enough for the cancel to find rollouts in flight
        return keyword_run(rendered, task)

    options = dict(run=run, propose=OneRulePerTurn(), rounds=6, n_workers=2, store=store, seed=1)

    def cancel_mid_wave(event):  # the first round's minibatches are 0.3 s rollouts: cancelled half-way
        if isinstance(event, ev.RoundStarted) and event.round == 0:
            threading.Timer(0.15, token.cancel).start()
    stopped = evolve(keyword_tasks(), keyword_reward, **options, stop=[token], on_event=cancel_mid_wave)
    assert stopped.error == "cancelled"
    queue = RunFiles(store).take_queue()
    assert queue.rollouts and all(key in queue.states for key, _, _ in queue.rollouts)
    RunFiles(store).save_queue(queue)  # put back what take_queue emptied

    slow.clear()
    seen: list = []
    resumed = evolve(keyword_tasks(), keyword_reward, **options, on_event=seen.append)
    assert next(e for e in seen if isinstance(e, ev.RunStarted)).resumed_round is not None
    assert resumed.usage.resumed == len(queue.rollouts)
    assert not RunFiles(store).queue_path.exists()  # taken, and nothing in flight at the end
    assert resumed.error is None


def test_ctrl_c_during_the_first_measurement_returns_an_interrupted_run_not_a_traceback(tmp_path):
    program = ("import time\nfrom agentdescent import Task, evolve\n"
               "tasks = [Task(id=f't{i}', prompt=str(i)) for i in range(12)]\n"
               "def run(rendered, task):\n    print('running', flush=True); time.sleep(30); return ''\n"
               "result = evolve(tasks, lambda t, o: 0.0, run=run, propose=lambda *a: None, rounds=5)\n"
               "print(f'error {result.error} {result.stop_reason}')\n")  # one write: a worker's line may fall around it
    child = subprocess.Popen([sys.executable, "-c", program], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().startswith("running")  # the workers' lines may run together
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and "Traceback" not in err
    assert "error interrupted interrupted (Ctrl-C) before the first round" in out


def test_a_ctrl_c_whose_interrupt_a_finalizer_swallowed_still_stops_the_run(tmp_path):
    """Python raises KeyboardInterrupt wherever the main thread is; in a git object's `__del__` it was
    printed and dropped, and the run went on to its end. The handler is called here where its
    interrupt is lost, as there."""
    program = ("import signal, threading, time\nfrom agentdescent import Task, evolve\n"
               "tasks = [Task(id=f't{i}', prompt=str(i)) for i in range(12)]\nonce = threading.Lock()\n"
               "def run(rendered, task):\n    if once.acquire(blocking=False):\n        try:\n"
               "            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)\n"
               "        except KeyboardInterrupt:\n            pass\n    time.sleep(30); return ''\n"
               "result = evolve(tasks, lambda t, o: 0.0, run=run, propose=lambda *a: None, rounds=5)\n"
               "print(f'error {result.error} {result.stop_reason}')\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert "error interrupted interrupted (Ctrl-C) before the first round" in done.stdout


def test_a_run_killed_while_it_measures_where_it_starts_resumes_with_those_calls_on_its_bill(tmp_path):
    """No checkpoint was saved before the first measurement: the resumed run took itself for a new
    one and emptied the start log, and the calls the killed process had paid for left the bill."""
    store = tmp_path / "ledger"
    child = subprocess.run([sys.executable, str(HERE / "resume_child.py"), str(store), "rollout", "3"],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    made, seen = [], []

    def run(rendered, task):
        made.append(task.id)
        return keyword_run(rendered, task)

    resumed = evolve(keyword_tasks(), keyword_reward, **{**keyword_run_options(store), "run": run}, on_event=seen.append)
    assert resumed.error is None
    assert next(e for e in seen if isinstance(e, ev.RunStarted)).resumed_round is not None
    usage, _ = RunFiles(store).bill()
    assert usage.calls >= 3 + len(made)  # the killed process's three calls, and this one's


def test_a_run_cancelled_just_after_a_commit_resumes_without_counting_that_commit_twice(tmp_path):
    """Its checkpoint held the round's outcomes but not the round as done: the resume read the commit
    back from the ledger and counted it again (7 committed on a ledger of 6)."""
    store, token = tmp_path / "ledger", CancelToken()
    stopped = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store), stop=[token],
                     on_event=cancel_at(token, ev.Committed, 1))
    assert stopped.error == "cancelled"
    resumed = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store))
    assert resumed.error is None
    ids = [o.diff_id for o in resumed.outcome_list]
    assert len(ids) == len(set(ids))
    assert resumed.outcomes()["committed"] == len(commits(store)) == RULES


def _router_propose(rendered, task, output, reward):
    """The right rule for a failure's team, or now and then a filler word's (a harmful rule): a
    function of its arguments alone, so that a run and its resumption ask the same."""
    if task.gold == "general":
        return None
    words = set(re.findall(r"\w+", task.prompt.lower()))
    word = next((w for w in SIGNALS[task.gold] if w in words), None)
    if word is None or int(hashlib.sha256((task.id + rendered).encode()).hexdigest(), 16) % 4 == 0:
        word = next((w for w in FILLERS if w in words), "order")
    return rule_text(word, task.gold)


def _router_run(store: Path, **options) -> EvolveResult:
    return evolve(router_tasks(0, signals=2), route_reward, propose=_router_propose, seed=2, store=store,
                  parallelism=Parallelism(reissue_after=None), **{"run": route, "rounds": 5, "n_workers": 1, **options})


@pytest.mark.parametrize("rollouts", [0, 2])
def test_a_run_cancelled_in_a_round_resumes_to_the_commits_of_the_run_left_alone(tmp_path, rollouts):
    """The checkpoint saved at the cancel held the sampler's position of the round it cut short (its
    turn dealt, its leads taken), and the rollouts that round ran were known when it was dealt
    again: the round was dealt otherwise, and the resumed run learnt another rule than the run left
    alone. Cancelled as the last round starts, and after two of its rollouts."""
    alone = _router_run(tmp_path / "alone")
    token, last, ran = CancelToken(), threading.Event(), []

    def run(rendered, task):
        if last.is_set():
            ran.append(task.id)
            if len(ran) > rollouts:
                token.cancel("the test asked")
        return route(rendered, task)

    def on_event(event):
        if isinstance(event, ev.RoundStarted) and event.round == 4:
            last.set()
            if not rollouts:
                token.cancel("the test asked")
    stopped = _router_run(tmp_path / "cut", stop=[token], on_event=on_event, run=run)
    assert stopped.error == "cancelled" and len(stopped.history) == 4
    resumed = _router_run(tmp_path / "cut")
    assert resumed.error is None and resumed.state == alone.state
    assert commits(tmp_path / "cut") == commits(tmp_path / "alone")


def test_a_ctrl_c_while_a_round_s_outcomes_are_told_resumes_with_each_diff_once(tmp_path):
    """The round's commit had landed and some of its outcomes were saved: the resume read every diff
    of the commit back again (one diff listed twice), and kept the rejected diff of a round that
    has no record in the history."""
    told = []

    def ctrl_c_at_the_second_outcome(event):
        if isinstance(event, ev.DiffOutcome):
            told.append(event)
            if len(told) == 2:
                raise KeyboardInterrupt

    store = tmp_path / "ledger"
    stopped = _router_run(store, rounds=4, n_workers=2, on_event=ctrl_c_at_the_second_outcome)
    assert stopped.error == "interrupted" and [h.round for h in stopped.history] == [0]  # its commit was in
    resumed = _router_run(store, rounds=4, n_workers=2)
    ids = [o.diff_id for o in resumed.outcome_list]
    assert len(ids) == len(set(ids))
    assert resumed.outcomes() == dict(sum((Counter(h.outcomes) for h in resumed.history), Counter()))
    landed = sorted(d for _, diffs in commits(store) for d in diffs.split(",") if d)
    assert sorted(o.diff_id for o in resumed.outcome_list if o.kind in ("committed", "fused")) == landed


LONE = b"data-\xff.txt".decode("utf-8", "surrogateescape")  # what os.fsdecode makes of a name that is not UTF-8


class RulesSometimesLone(OneRulePerTurn):
    """One rule per turn; its second proposal holds a lone surrogate (refused at admission)."""

    def __init__(self) -> None:
        self.calls = 0

    def batch(self, rendered, rollouts):
        self.calls += 1
        return super().batch(rendered, rollouts) + (f" See {LONE}." if self.calls == 2 else "")


def test_lone_surrogates_in_outputs_errors_proposals_and_warnings_stop_neither_a_run_nor_its_resume(tmp_path):
    def run(rendered, task):
        if task.id.endswith("3"):
            raise FileNotFoundError(f"no such file: {LONE}")
        return f"{keyword_run(rendered, task)} from {LONE}"

    def reward(task, output):
        return float(output.split(" ")[0] == task.gold)

    def cut_with_a_broken_display(token):
        def on_event(event):  # a progress display that breaks on a file name, as the run is cancelled
            if isinstance(event, ev.RoundEnded) and event.round == 1:
                token.cancel("the test asked")
                raise ValueError(f"cannot show {LONE}")
        return on_event

    store, token = tmp_path / "ledger", CancelToken()
    options = dict(run=run, strategy=AppendRules(), rounds=4, n_workers=1, seed=3, store=store,
                   parallelism=Parallelism(reissue_after=None))
    stopped = evolve(keyword_tasks(), reward, propose=RulesSometimesLone(), stop=[token],
                     on_event=cut_with_a_broken_display(token), **options)
    assert stopped.error == "cancelled", stopped.stop_reason
    seen: list = []
    resumed = evolve(keyword_tasks(), reward, propose=RulesSometimesLone(), on_event=seen.append, **options)
    assert next(e for e in seen if isinstance(e, ev.RunStarted)).resumed_round == 2
    assert resumed.error is None and resumed.stop_reason == "ran all 4 rounds"
    escaped = "data-\\udcff.txt"  # each lone surrogate kept as its escape
    assert escaped in resumed.usage.errors[0] and any(escaped in w for w in resumed.warnings)
    assert any(o.kind == "invalid" and "lone surrogate" in o.reason for o in resumed.outcome_list)
    kept = RunFiles(store).rollouts({t.id: t for t in keyword_tasks()})
    assert any(escaped in r.output for _, r in kept)
    # what the run's files, a status, `show` and a host's pages are written from, as UTF-8
    texts = [resumed.to_json(), (store / "agentdescent" / "checkpoint.json").read_text(encoding="utf-8"),
             *(r.model_dump_json() for _, r in kept), *(json.dumps(ev.to_json(e), ensure_ascii=False) for e in seen)]
    assert all(text.encode("utf-8") for text in texts)



def test_a_resumed_run_keeps_back_what_measuring_its_last_commit_takes_from_the_rollouts_left_in_flight(tmp_path):
    """The acceptance rollouts a cancel left in flight ran on resume before the rounds kept back the
    calls of the held-out measurement at the end: at a cap they spent them, the last commit went
    unmeasured, and those that ran before the cap were not counted as resumed. They are the rounds'
    work and now wait on the same allowance; each that ran is counted."""
    from agentdescent import Budget

    store, token, release, held = tmp_path / "ledger", CancelToken(), threading.Event(), set()
    lock = threading.Lock()

    def run(rendered, task):
        if not release.is_set() and rendered.count("rule") >= 4:  # the second step's acceptance test: held in flight
            with lock:
                held.add((rendered, task.id))
                if len(held) == 9:  # cancel once nine are in flight, however slowly a busy machine starts them
                    token.cancel()
            release.wait(10)
        return keyword_run(rendered, task)

    # The rounds measure no commit (share 0), so which version the cancel leaves unmeasured does not
    # hang on whether a background measurement had started by then.
    options = dict(run=run, propose=OneRulePerTurn(), rounds=8, n_workers=2, store=store, seed=1,
                   policies=Policies(validation=Amortized(share=0)))
    stopped = evolve(keyword_tasks(), keyword_reward, **options, stop=[token])
    release.set()
    queue = RunFiles(store).take_queue()
    RunFiles(store).save_queue(queue)  # put back what take_queue emptied
    assert stopped.error == "cancelled" and stopped.unmeasured is not None and len(queue.rollouts) > 8
    held_out = round(len(keyword_tasks()) * 0.3)
    resumed = evolve(keyword_tasks(), keyword_reward, **options, budget=Budget(max_calls=stopped.usage.calls + held_out + 4))
    assert resumed.unmeasured is None and not any("never measured" in w for w in resumed.warnings), resumed.warnings
    assert 0 < resumed.usage.resumed < len(queue.rollouts)  # the rest would have spent what the measurement needs


class VagueFirst:
    """A batch reflector that heeds what the run refused: for its first failure a vague rule, which
    fixes nothing and the gate refuses, then, told it was refused (`tried`), the rule that fixes it.
    A reflector not told proposes the vague rule again. What it was told, call by call, in `told`."""

    def __init__(self) -> None:
        self.told: list[list[str]] = []

    def __call__(self, rendered, task, output, reward):  # pragma: no cover - batch is used
        return None

    def batch(self, rendered, rollouts, *, tried=()):
        self.told.append([t.proposal for t in tried])
        gold = rollouts[0].task.gold
        vague = f"Mind the requests about {gold}."
        return f"rule {gold}." if vague in self.told[-1] else vague


def _vague_first_run(store: Path, propose: VagueFirst, **options) -> EvolveResult:
    exact = Policies(acceptance=BetaAcceptance(rewards="exact"))  # where rewards may be samples, nothing is told
    return evolve(keyword_tasks(), keyword_reward, **{**keyword_run_options(store), "propose": propose,
                                                      "rounds": 2 * RULES + 2, "policies": exact, **options})


@pytest.mark.parametrize("event_type, round_", [(ev.RoundStarted, 3), (ev.DiffOutcome, 4)])
def test_a_resumed_run_tells_its_reflector_what_the_run_refused_before_it_stopped(tmp_path, event_type, round_):
    """The refusals a reflector is told lived only in the process: a resumed run told it nothing,
    and its reflector proposed again, and had tested again, what the run had refused."""
    whole = VagueFirst()
    alone = _vague_first_run(tmp_path / "alone", whole)
    assert alone.error is None and alone.final_reward == 1.0 and alone.outcomes()["rejected_by_test"] == RULES

    token, before, after = CancelToken(), VagueFirst(), VagueFirst()
    stopped = _vague_first_run(tmp_path / "cut", before, stop=[token], on_event=cancel_at(token, event_type, round_))
    assert stopped.error == "cancelled" and any(before.told)  # it had been told something: it is to be told again
    resumed = _vague_first_run(tmp_path / "cut", after)
    assert before.told + after.told == whole.told
    assert commits(tmp_path / "cut") == commits(tmp_path / "alone") and resumed.state == alone.state
    assert resumed.outcomes() == alone.outcomes() and resumed.usage.calls == alone.usage.calls


def test_a_round_s_refusals_are_in_its_checkpoint_before_its_outcomes_are_told(tmp_path):
    """A process killed as it tells a round's outcomes resumes from the checkpoint that ended the
    round: the refusals of the round are in it."""
    store, saved = tmp_path / "ledger", []

    def on_event(event):
        if isinstance(event, ev.DiffOutcome) and event.outcome.kind == "rejected_by_test" and not saved:
            saved.append((event.diff.evidence.rationale, RunFiles(store).load()))
    _vague_first_run(store, VagueFirst(), rounds=1, on_event=on_event)
    refused, checkpoint = saved[0]
    assert checkpoint.next_round == 1
    assert checkpoint.refused == [Tried(proposal=refused, why="fixes none of the 2 failures it was made from")]


def test_a_checkpoint_holds_the_refusals_with_keys_redacted_and_one_without_them_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-7f3a9c2e1b5d")
    files = RunFiles(tmp_path)
    files.save(Checkpoint(fingerprint="f", strategy="s",
                          refused=[Tried(proposal="Call sk-canary-7f3a9c2e1b5d.", why="fixes none of the 1 failures")]))
    assert "7f3a9c2e1b5d" not in files.checkpoint_path.read_text(encoding="utf-8")
    assert files.load().refused == [Tried(proposal="Call [redacted OPENAI_API_KEY].", why="fixes none of the 1 failures")]
    older = json.loads(files.checkpoint_path.read_text(encoding="utf-8"))
    del older["refused"]  # as a checkpoint written before it held them
    files.checkpoint_path.write_text(json.dumps(older), encoding="utf-8")
    assert files.load(strict=True).refused == []
