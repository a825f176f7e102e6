"""The process and Ray executors: the same run as on threads, callables that cannot travel refused
up front, and a worker killed mid-rollout whose call is run again while the run goes on."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from agentdescent import Budget, CancelToken, Parallelism, Task, UserError, evolve, scripted
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.engine.calls.processes import ProcessExecutor
from agentdescent.engine.persist.checkpoint import RunFiles
from agentdescent.engine.persist.journal import StartLog

ROOT = Path(__file__).resolve().parents[1]

# Module-level callables, so that another process can import them by name.


def run(rendered: str, task: Task) -> str:
    """Answers the year when the artifact says to; dies once per marked task when asked to."""
    marker = task.meta.get("die_once")
    if marker and not Path(marker).exists():
        Path(marker).write_text("died here")
        os._exit(1)  # the process goes, mid-rollout, as a killed or out-of-memory worker does
    return "2026" if "state the year" in rendered else "soon"


def reward(task: Task, output: str) -> float:
    return float(output == task.gold)


def run_that_dies_on_q3(rendered: str, task: Task) -> str:
    if task.id == "q3":
        os._exit(1)  # every time: a crash in the user's code
    return run(rendered, task)


def run_that_hangs(rendered: str, task: Task) -> str:
    time.sleep(60)
    return "soon"


def run_that_interrupts(rendered: str, task: Task) -> str:
    raise KeyboardInterrupt  # the call's own: no Ctrl-C behind it


def run_that_says_it_runs(rendered: str, task: Task) -> str:
    print("running", flush=True)
    time.sleep(60)
    return "soon"


def propose(rendered: str, task: Task, output: str, value: float) -> str | None:
    return "always state the year" if value < 1.0 else None


class Unloadable:
    """A run that pickles here and cannot be loaded where it is sent (its client needs what only
    this process has, say)."""

    def __call__(self, rendered: str, task: Task) -> str:
        return run(rendered, task)

    def __reduce__(self):
        return _refuse_to_load, ("a missing variable in the worker",)


def _refuse_to_load(why: str) -> Unloadable:
    raise RuntimeError(f"cannot rebuild my client: {why}")


class SlowToLoad(Unloadable):
    """A run that takes seconds to load in a worker (a large model read from disk, say)."""

    def __reduce__(self):
        return _load_slowly, ()


def _load_slowly() -> SlowToLoad:
    time.sleep(30)
    return SlowToLoad()


def popping_reward(task: Task, output: str) -> float:
    return float(output == task.meta.pop("expected"))  # a common slip: pop where get was meant


def year_tasks(n: int = 12, die_once: Path | None = None) -> list[Task]:
    meta = {"die_once": str(die_once)} if die_once else {}
    return [Task(id=f"q{i}", prompt=f"when is event {i}?", gold="2026", meta=meta if i == 5 else {})
            for i in range(n)]


def converge(executor: str, tasks: list[Task]):
    # stragglers are not re-issued: on a loaded machine a slow call would be run twice and counted
    # twice, and the executors are compared here on the rollouts a run asks for
    return evolve(tasks, reward, run=run, propose=propose, rounds=4, n_workers=2, max_concurrency=4,
                  parallelism=Parallelism(executor=executor, reissue_after=None), target_reward=1.0, seed=3)


def answer(prompt: str) -> str:
    return "ok"


MODEL = scripted(answer)  # metered: each unit brings back how many times it was asked


def run_asking_three_times(rendered: str, task: Task) -> str:
    """An agent that asks its model three times a rollout: a unit of three calls."""
    for _ in range(3):
        MODEL(task.prompt)
    return run(rendered, task)


def propose_asking_once(rendered: str, task: Task, output: str, value: float) -> str | None:
    MODEL("reflect")
    return f"always state the year ({task.id})" if value < 1.0 else None


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_max_calls_is_passed_only_by_the_units_running_when_it_is_reached(executor):
    """Each unit asks the budget as it starts, not as it is queued: a whole wave was let through
    before the first unit's real cost was known, and a cap of 60 ended at 112 calls."""
    spend_sixty_calls(executor)


def spend_sixty_calls(executor: str) -> None:
    width = 2
    result = evolve(year_tasks(16), reward, run=run_asking_three_times, propose=propose_asking_once, rounds=8,
                    n_workers=2, max_concurrency=width, budget=Budget(max_calls=60),
                    parallelism=Parallelism(executor=executor, reissue_after=None), seed=3)
    assert "call budget is spent" in result.stop_reason and result.error is None
    assert result.usage.calls <= 60 + width * (3 - 1), result.usage.as_record()  # each running unit, past its first
    assert result.usage.model.calls == result.usage.calls  # what the model was asked is what was billed


def run_asking_on_threads(rendered: str, task: Task) -> str:
    """An agent that asks its model twice at once, on threads of its own: no meter is there."""
    with futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(MODEL, [task.prompt] * 2))
    return run(rendered, task)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_calls_a_run_makes_on_its_own_threads_come_back_with_its_rollouts_from_any_executor(executor):
    """In a worker process no run is active: the rollout running there catches them, and they
    travel back in its spend. They were on no bill."""
    result = evolve(year_tasks(), reward, run=run_asking_on_threads, propose=propose_asking_once, rounds=2,
                    n_workers=2, max_concurrency=2, parallelism=Parallelism(executor=executor, reissue_after=None), seed=3)
    usage = result.usage
    assert usage.model.calls == 2 * usage.rollouts + usage.proposals, usage.as_record()
    assert usage.stray_calls == (2 * usage.rollouts if executor == "thread" else 0)  # on threads: the run's own


def test_a_run_stopped_by_its_budget_counts_only_the_units_that_started():
    """The calls queued behind busy ones when the cap was reached never ran: the stop reason
    counted them (30 of max_calls=30, where 26 ran). The rounds stop 5 short of the cap: what
    measuring the 5 held-out tasks at the end takes, kept back for it (nothing new to measure here)."""
    ran = []

    def counted(rendered: str, task: Task) -> str:
        ran.append(task.id)
        time.sleep(0.05)  # long enough that a wave waits its turn behind the one call running
        return run(rendered, task)

    result = evolve(year_tasks(16), reward, run=counted, propose=propose_asking_once, rounds=8, n_workers=2,
                    max_concurrency=1, budget=Budget(max_calls=45), parallelism=Parallelism(reissue_after=None), seed=3)
    assert f"({result.usage.calls} of max_calls=45, the other 5 kept for measuring" in result.stop_reason
    assert result.usage.calls == result.usage.rollouts + result.usage.proposals == 40
    assert len(ran) == result.usage.rollouts


# -- processes ---------------------------------------------------------------------------------


def test_a_run_on_processes_learns_what_it_learns_on_threads():
    on_threads, on_processes = converge("thread", year_tasks()), converge("process", year_tasks())
    assert on_processes.final_reward == on_threads.final_reward == 1.0
    assert on_processes.state == on_threads.state
    assert on_processes.usage.rollouts == on_threads.usage.rollouts  # usage came back with every result


def test_a_process_killed_mid_rollout_is_replaced_and_its_rollout_run_again(tmp_path):
    marker = tmp_path / "died"
    result = converge("process", year_tasks(die_once=marker))
    assert marker.exists()  # a worker process did die
    assert result.final_reward == 1.0 and result.error is None


def test_the_process_pool_rebuilds_once_per_break_and_gives_up_after_its_retries(tmp_path):
    pool = ProcessExecutor(2, retries=1)
    try:
        assert pool.submit(os.getpid).result(timeout=60) != os.getpid()
        with pytest.raises(Exception):  # dies every time: retried once, then the error is the caller's
            pool.submit(os._exit, 3).result(timeout=60)
        assert pool.restarts >= 1
        assert pool.submit(abs, -2).result(timeout=60) == 2  # the rebuilt pool serves on
    finally:
        pool.shutdown()


def test_a_call_that_kills_its_process_every_time_fails_alone(tmp_path):
    """The call in the pool beside it when it broke is sent again alone, and answers: sent again
    together, it was in the pool each time the other killed it, and failed with it."""
    pool = ProcessExecutor(2, retries=1)
    try:
        killer = pool.submit(os._exit, 3)
        beside = pool.submit(wait_for_file, str(tmp_path / "killer gone"), 7, 10.0)  # or 10 s, if alone first
        with pytest.raises(BrokenProcessPool):
            killer.result(timeout=120)
        (tmp_path / "killer gone").touch()
        assert beside.result(timeout=120) == 7
    finally:
        pool.shutdown()


def test_a_call_is_on_the_start_log_when_a_process_takes_it_not_when_it_is_queued(tmp_path):
    """A cancelled run's calls queued behind busy processes never started: they are on no bill."""
    starts = StartLog(tmp_path / "run" / "starts")
    pool = ProcessExecutor(1, on_start=starts.mark)
    try:
        release = tmp_path / "release"
        first = pool.submit(wait_for_file, str(release), 0)
        queued = [pool.submit(abs, -i) for i in range(1, 8)]
        deadline = time.monotonic() + 60
        while starts.count() < 1 and time.monotonic() < deadline:  # the process took the first
            time.sleep(0.01)
        assert starts.count() == 1
        release.touch()
        assert first.result(timeout=60) == 0 and [f.result(timeout=60) for f in queued] == list(range(1, 8))
        assert starts.count() == 8
    finally:
        pool.shutdown()
        starts.close()


def test_calls_abandoned_while_they_waited_are_dropped_quietly(tmp_path, caplog):
    """A cancelled run abandons its thread pool: the calls still queued are skipped, not started
    on a finished future (concurrent.futures logs CRITICAL 'in unexpected state' to the user's stderr)."""
    pool = ThreadExecutor(1)
    release = tmp_path / "release"
    first = pool.submit(wait_for_file, str(release), 0)
    queued = [pool.submit(abs, -i) for i in range(1, 6)]
    pool.abandon(RuntimeError("cancelled"))
    release.touch()
    with pytest.raises(RuntimeError, match="cancelled"):
        first.result(timeout=60)
    assert all(isinstance(f.exception(timeout=60), RuntimeError) for f in queued)
    with pytest.raises(RuntimeError, match="cancelled"):  # new work is refused
        pool.submit(abs, -1)
    deadline = time.monotonic() + 60
    while not pool._work.empty() and time.monotonic() < deadline:  # its thread went through the queue
        time.sleep(0.01)
    pool.shutdown(timeout=60)
    assert not [r for r in caplog.records if r.name == "concurrent.futures"], caplog.records


def test_calls_dropped_by_a_shutdown_count_as_done_for_those_who_wait_on_them(tmp_path):
    """A shutdown waits with `futures.wait`, which took a queued call cancelled by it for one still
    to come: a run stopped by its budget waited out the whole grace for calls that would never run."""
    pool = ThreadExecutor(1)
    release = tmp_path / "release"
    first = pool.submit(wait_for_file, str(release), 0)
    queued = [pool.submit(abs, -i) for i in range(1, 4)]
    pool.shutdown(wait=False)
    assert futures.wait(queued, timeout=0).not_done == set()
    assert all(f.cancelled() for f in queued)
    release.touch()
    assert first.result(timeout=60) == 0


def test_a_rollout_whose_process_dies_every_time_is_a_failed_rollout_and_the_run_goes_on():
    """Only that rollout: the calls lost with it are sent again one at a time, each alone in the
    pool (sent again together, each break cost each of them a try, and other tasks failed too)."""
    result = evolve(year_tasks(), reward, run=run_that_dies_on_q3, propose=propose, rounds=3, n_workers=2,
                    max_concurrency=2, parallelism=Parallelism(executor="process", reissue_after=None))
    assert result.error is None and result.final_reward > 0
    assert any("the worker process running it died, 3 times" in error for error in result.usage.errors)
    assert all("q3" in error for error in result.usage.errors), result.usage.errors


def test_a_cancelled_run_on_processes_stops_its_calls_and_lets_the_program_exit(tmp_path):
    program = ("import threading, time\nfrom agentdescent import CancelToken, Parallelism, evolve\n"
               "from tests.test_executors import propose, reward, run_that_hangs, year_tasks\n"
               "if __name__ == '__main__':\n"
               "    token = CancelToken(); threading.Timer(1.0, lambda: token.cancel('enough')).start()\n"
               "    result = evolve(year_tasks(), reward, run=run_that_hangs, propose=propose, stop=[token],\n"
               "                    parallelism=Parallelism(executor='process'))\n"
               "    print(result.stop_reason, flush=True)\n")
    (tmp_path / "cancel_it.py").write_text(program, encoding="utf-8")
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(tmp_path / "cancel_it.py")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "cancelled (enough)" in done.stdout, done.stderr
    assert time.monotonic() - started < 30  # not the 60 s each hanging call sleeps: their processes were stopped


def test_a_keyboard_interrupt_a_run_raises_in_a_worker_process_is_its_error_not_a_ctrl_c():
    """It was taken for the user's Ctrl-C ("interrupted (Ctrl-C) before the first round", no task
    named), where on threads the same run is told what it did wrong."""
    with pytest.raises(UserError, match=r"run raised KeyboardInterrupt on task «q\d+», in a worker process no Ctrl-C "
                                        "reached: it must return its value"):
        evolve(year_tasks(), reward, run=run_that_interrupts, propose=propose, rounds=1,
               parallelism=Parallelism(executor="process"))


def test_a_ctrl_c_to_the_process_group_stops_a_run_on_processes_as_a_ctrl_c(tmp_path):
    """The terminal sends SIGINT to the driver and its worker processes alike: the workers' calls
    are interrupted too, and that is the user's Ctrl-C, not a call's error."""
    program = ("from agentdescent import Parallelism, evolve\n"
               "from tests.test_executors import propose, reward, run_that_says_it_runs, year_tasks\n"
               "if __name__ == '__main__':\n"
               "    result = evolve(year_tasks(), reward, run=run_that_says_it_runs, propose=propose,\n"
               "                    parallelism=Parallelism(executor='process'))\n"
               "    print(f'error {result.error} {result.stop_reason}', flush=True)\n")
    (tmp_path / "interrupt_it.py").write_text(program, encoding="utf-8")
    child = subprocess.Popen([sys.executable, str(tmp_path / "interrupt_it.py")], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             start_new_session=True)
    try:
        assert child.stdout.readline().startswith("running")  # a worker process is in its call
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 0, err
    assert "error interrupted interrupted (Ctrl-C) before the first round" in out, err


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_reward_that_changes_its_task_changes_no_other_rollout_nor_the_caller_s_tasks(executor):
    tasks = [Task(id=f"q{i}", prompt=f"when is event {i}?", meta={"expected": "2026"}) for i in range(12)]
    result = evolve(tasks, popping_reward, run=run, propose=propose, rounds=3, n_workers=2,
                    parallelism=Parallelism(executor=executor, reissue_after=None))
    assert result.error is None and result.usage.failures == 0 and result.final_reward == 1.0
    assert all(task.meta == {"expected": "2026"} for task in tasks)


def test_a_callable_that_cannot_be_pickled_is_named_before_the_run_starts():
    with pytest.raises(UserError, match="sends propose to other processes, and it cannot be pickled"):
        evolve(year_tasks(), reward, run=run, propose=lambda *a: None, parallelism=Parallelism(executor="process"))


def test_a_callable_a_worker_process_cannot_load_is_named_before_any_call_is_made(tmp_path):
    """It pickled, so every call went and broke its worker as it was unpickled: the pool was rebuilt
    and each call sent again (minutes, a traceback each time, every call billed, none made), and
    the run's error guessed at a crash."""
    with pytest.raises(UserError, match=r"sends run to other processes, and they cannot load it \(RuntimeError: "
                                        r"«cannot rebuild my client: a missing variable in the worker»\)"):
        evolve(year_tasks(), reward, run=Unloadable(), propose=propose, rounds=2, store=tmp_path / "ledger",
               parallelism=Parallelism(executor="process", reissue_after=None))
    assert RunFiles(tmp_path / "ledger").starts.count() == 0  # no call was paid for


def test_a_run_cancelled_while_its_workers_load_its_callables_ends_cancelled():
    """The cancel stopped the loading processes, which read as a crash of the callable's loading."""
    token = CancelToken()
    threading.Timer(1.0, lambda: token.cancel("enough")).start()
    started = time.monotonic()
    result = evolve(year_tasks(), reward, run=SlowToLoad(), propose=propose, stop=[token],
                    parallelism=Parallelism(executor="process"))
    assert result.stop_reason == "cancelled (enough)" and result.error == "cancelled" and result.usage.calls == 0
    assert time.monotonic() - started < 25  # not the 30 s a load takes: the workers were stopped


def test_a_function_defined_under_the_main_guard_is_named_with_where_to_define_it(tmp_path):
    program = ("from agentdescent import Parallelism, UserError, evolve\n"
               "from tests.test_executors import propose, reward, run, year_tasks\n"
               "if __name__ == '__main__':\n"
               "    def guarded(rendered, task):\n"
               "        return run(rendered, task)\n"
               "    try:\n"
               "        evolve(year_tasks(), reward, run=guarded, propose=propose, parallelism=Parallelism(executor='process'))\n"
               "    except UserError as exc:\n"
               "        print(exc)\n")
    (tmp_path / "guarded.py").write_text(program, encoding="utf-8")
    done = subprocess.run([sys.executable, str(tmp_path / "guarded.py")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "sends run to other processes, and they cannot load it (AttributeError" in done.stdout, done.stderr
    assert "Can't get attribute 'guarded'" in done.stdout and "not under `if __name__ == '__main__':`" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr  # not a worker's traceback per call


@pytest.mark.parametrize("executor", ["process", "ray"])
def test_a_task_that_cannot_be_sent_is_named_with_its_field_before_the_run_starts(executor):
    """A lock in a task's meta ended the run in a raw pickling traceback."""
    if executor == "ray":
        pytest.importorskip("ray", reason='the Ray executor needs pip install "agentdescent[ray]"')
    tasks = year_tasks()
    tasks[4] = tasks[4].model_copy(update={"meta": {"guard": threading.Lock()}})
    with pytest.raises(UserError, match=r"task «q4» cannot be sent: its meta\['guard'\] holds a lock object"):
        evolve(tasks, reward, run=run, propose=propose, parallelism=Parallelism(executor=executor))


def test_an_unknown_executor_is_refused():
    with pytest.raises(UserError, match="choose one of thread, process, ray"):
        Parallelism(executor="gpu")


# -- Ray ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason='the Ray executor needs pip install "agentdescent[ray]"')
    # Ray's workers import this module's callables by name, as a cluster imports the user's code
    tests = Path(__file__).parent
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}})
    yield ray
    ray.shutdown()


def test_a_run_on_ray_learns_what_it_learns_on_threads(local_ray):
    on_threads, on_ray = converge("thread", year_tasks()), converge("ray", year_tasks())
    assert on_ray.final_reward == on_threads.final_reward == 1.0
    assert on_ray.state == on_threads.state
    assert on_ray.usage.rollouts == on_threads.usage.rollouts
    assert local_ray.is_initialized()  # a cluster the caller started is left running


def test_on_ray_too_max_calls_is_passed_only_by_the_units_running_when_it_is_reached(local_ray):
    spend_sixty_calls("ray")


def test_on_ray_the_calls_a_run_makes_on_its_own_threads_come_back_with_its_rollouts(local_ray):
    """An actor runs several rollouts at once: the newest catches them, and the run's bill is whole."""
    result = evolve(year_tasks(), reward, run=run_asking_on_threads, propose=propose_asking_once, rounds=2,
                    n_workers=2, max_concurrency=4, parallelism=Parallelism(executor="ray", reissue_after=None), seed=3)
    assert result.usage.model.calls == 2 * result.usage.rollouts + result.usage.proposals, result.usage.as_record()


def test_a_ray_actor_killed_mid_rollout_is_restarted_and_its_rollout_run_again(local_ray, tmp_path):
    marker = tmp_path / "died"
    result = converge("ray", year_tasks(die_once=marker))
    assert marker.exists() and result.final_reward == 1.0 and result.error is None


def wait_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def wait_for_file(path: str, value: int, most: float = 60.0) -> int:
    deadline = time.monotonic() + most
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def dies_once_then(marker: str, value: int) -> int:
    if not Path(marker).exists():
        Path(marker).write_text("died here")
        os._exit(1)
    return value


def raises(value: int) -> int:
    raise ValueError(f"bad value {value}")


def test_ray_sends_a_wave_in_batches_and_each_call_is_answered_as_it_finishes(local_ray, tmp_path):
    from agentdescent.engine.calls.ray_executor import RayExecutor

    release = tmp_path / "release"
    pool = RayExecutor(16)
    try:
        held = pool.submit(wait_for_file, str(release), -1)
        futures = [pool.submit(wait_then, 0.01, i) for i in range(40)] + [pool.submit(raises, 7)]
        assert [f.result(timeout=60) for f in futures[:40]] == list(range(40))
        assert not held.done()  # the quick ones did not wait for the one held, sent with them
        with pytest.raises(ValueError, match="bad value 7"):  # the call's own error, not the batch's
            futures[40].result(timeout=60)
        release.write_text("go")
        assert held.result(timeout=60) == -1
    finally:
        pool.shutdown()


def test_ray_bills_a_call_as_it_starts_not_as_its_batch_is_handed_over(local_ray, tmp_path):
    """A batch went to the actor whole, though it runs two calls at once, and `on_start` billed each
    at once: an interrupted run was billed for calls that never ran."""
    from agentdescent.engine.calls.ray_executor import RayExecutor

    lock, counts = threading.Lock(), {"started": 0, "back": 0, "most": 0}

    def started() -> None:
        with lock:
            counts["started"] += 1
            counts["most"] = max(counts["most"], counts["started"] - counts["back"])

    def back(_: object) -> None:
        with lock:
            counts["back"] += 1

    release = tmp_path / "release"
    pool = RayExecutor(2, actors=1, on_start=started)
    try:
        waiting = [pool.submit(wait_for_file, str(release), i) for i in range(6)]
        for future in waiting:
            future.add_done_callback(back)
        deadline = time.monotonic() + 60
        while counts["started"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.touch()
        assert [f.result(timeout=120) for f in waiting] == list(range(6))
        assert counts["started"] == 6 and counts["most"] == pool.width == 2
    finally:
        pool.shutdown()


def test_a_ray_actor_runs_at_most_its_bound_of_calls_at_once(local_ray):
    """Ray starts all of an actor's threads with it: max_concurrency=30000 asked for an actor of
    60008 threads, which never came up, and the run hung without a word."""
    from agentdescent.engine.calls.ray_executor import ACTOR_THREADS, RayExecutor

    pool = RayExecutor(ACTOR_THREADS + 1, actors=1)
    try:
        assert pool.width == ACTOR_THREADS
        assert pool.submit(abs, -5).result(timeout=120) == 5
    finally:
        pool.shutdown()


def test_an_actor_killed_mid_batch_is_restarted_and_the_calls_it_owed_are_sent_again(local_ray, tmp_path):
    from agentdescent.engine.calls.ray_executor import RayExecutor

    pool = RayExecutor(8)
    try:
        futures = [pool.submit(wait_then, 0.2, i) for i in range(6)]
        futures.append(pool.submit(dies_once_then, str(tmp_path / "died"), 99))
        assert [f.result(timeout=120) for f in futures] == [*range(6), 99]
        assert (tmp_path / "died").exists()
    finally:
        pool.shutdown()


def test_a_call_that_kills_its_actor_every_time_fails_after_its_retries(local_ray):
    from agentdescent.engine.calls.ray_executor import RayExecutor

    pool = RayExecutor(4, retries=1)
    try:
        with pytest.raises(Exception, match="(?i)actor|died|exit"):
            pool.submit(os._exit, 3).result(timeout=120)
        assert pool.submit(abs, -2).result(timeout=60) == 2  # the restarted actor serves on
    finally:
        pool.shutdown()



def test_a_rollout_whose_actor_dies_every_time_is_a_failed_rollout_not_a_ray_traceback(local_ray, monkeypatch):
    """As on processes, the run's result says so. The calls that shared the actor (one a node) when
    it died are sent again alone, so that they are not failed with it (the first measurement failed
    whole, and the run with it). One retry a call, not the default two: each death costs seconds
    of an actor's restart, and what a retry does is the same the first time."""
    from agentdescent.engine.calls import ray_executor

    monkeypatch.setattr(ray_executor, "RayExecutor", functools.partial(ray_executor.RayExecutor, retries=1))
    result = evolve(year_tasks(7), reward, run=run_that_dies_on_q3, propose=propose, rounds=1, n_workers=2,
                    parallelism=Parallelism(executor="ray", reissue_after=None))
    assert result.error is None and result.usage.errors
    assert all("the Ray actor running it died" in text and "q3" in text for text in result.usage.errors), result.usage.errors

def test_the_next_executor_on_the_callers_cluster_takes_a_clean_ones_actor_back_warm(local_ray):
    from agentdescent.engine.calls.ray_executor import RayExecutor

    first = RayExecutor(3)
    pid = first.submit(os.getpid).result(timeout=60)
    first.shutdown()
    second = RayExecutor(3)
    try:
        assert second.submit(os.getpid).result(timeout=60) == pid  # the same worker process, no new start
        assert second.submit(abs, -4).result(timeout=60) == 4
    finally:
        second.shutdown()


def test_an_executor_whose_calls_may_still_run_hands_no_actor_on(local_ray):
    from agentdescent.engine.calls.ray_executor import RayExecutor

    pids, started = [], threading.Semaphore(0)
    pool = RayExecutor(5, on_start=started.release)
    pids.append(pool.submit(os.getpid).result(timeout=60))
    pool.submit(wait_then, 30, 0)
    assert started.acquire(timeout=60) and started.acquire(timeout=60)  # sent to its actor, not waiting here
    assert pool.shutdown(wait=True, timeout=0.2) == 1  # one call still holds a thread of its actor: killed
    pool = RayExecutor(5)
    pids.append(pool.submit(os.getpid).result(timeout=120))
    pool.abandon(RuntimeError("the run was cancelled"))  # a cancelled run's calls may still run: killed too
    pool = RayExecutor(5)
    try:
        pids.append(pool.submit(os.getpid).result(timeout=120))
    finally:
        pool.shutdown()
    assert len(set(pids)) == 3, pids  # each started an actor of its own


def test_idle_actors_are_kept_for_the_last_three_sizes_and_one_cluster_only():
    from agentdescent.engine.calls.ray_idle import Idle  # plain bookkeeping: no Ray needed

    idle = Idle()
    assert idle.take("job-1", 8, 1) == []
    assert [idle.give("job-1", size, [f"a{size}", f"b{size}"]) for size in (8, 16, 32)] == [[], [], []]
    assert idle.give("job-1", 8, ["c8"]) == []  # 8 is the newest size now
    assert idle.give("job-1", 64, ["a64"]) == ["a16", "b16"]  # a fourth size: the oldest one's actors go
    assert idle.take("job-1", 8, 2) == ["a8", "b8"] and idle.take("job-1", 8, 2) == ["c8"]
    assert idle.give("job-0", 32, ["old"]) == ["old"]  # another cluster's actors are not kept
    assert idle.take("job-2", 32, 1) == [] and idle.give("job-1", 64, ["x"]) == ["x"]  # a new job forgets the old
    assert idle.give("job-2", 8, ["z"]) == []
    assert [idle.take("job-2", size, 1) for size in (1, 2, 3)] == [[], [], []]  # sizes asked for, none idle,
    assert idle.give("job-2", 4, ["y"]) == [] and idle.take("job-2", 8, 1) == ["z"]  # do not count as kept ones


def test_an_actor_taken_back_lets_go_of_the_last_executors_callables(local_ray):
    from agentdescent.engine.calls.ray_runner import Runner

    runner = Runner(2)
    ref = local_ray.put(abs)
    assert [a for batch in runner.run([(lambda fn, x: fn(x), (ref, -3))]) for a in batch] == [(0, True, 3)]
    assert list(runner._objects) == [ref]
    runner.forget()
    assert runner._objects == {}


def test_ray_takes_closures_but_names_a_callable_it_cannot_send(local_ray):
    lock = threading.Lock()

    def holds_a_lock(rendered, task):
        with lock:
            return run(rendered, task)

    with pytest.raises(UserError, match="sends run to Ray's workers, and it cannot be serialized"):
        evolve(year_tasks(), reward, run=holds_a_lock, propose=propose, parallelism=Parallelism(executor="ray"))


def test_code_only_this_process_can_import_is_named_with_the_way_to_give_it_to_ray(local_ray, tmp_path, monkeypatch):
    """A scorer beside the script, on its sys.path only, ended the run in Ray's 47-line traceback."""
    (tmp_path / "scorer_beside_the_script.py").write_text(
        "def run(rendered, task):\n    return 'soon'\n\n\ndef reward(task, output):\n    return 0.0\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import scorer_beside_the_script as beside

    with pytest.raises(UserError, match=r"Ray's workers cannot import «scorer_beside_the_script».*'py_modules'"):
        evolve(year_tasks(), beside.reward, run=beside.run, propose=propose, rounds=1,
               parallelism=Parallelism(executor="ray", reissue_after=None))


def test_a_callable_ray_cannot_load_is_named_before_any_call_and_never_as_ray_s_error(local_ray):
    """Ray's RaySystemError came out of evolve, through the first held-out measurement."""
    with pytest.raises(UserError, match=r"sends run to Ray's workers, and they cannot load it \(RuntimeError: "
                                        r"«cannot rebuild my client: a missing variable in the worker»\)"):
        evolve(year_tasks(), reward, run=Unloadable(), propose=propose, rounds=2,
               parallelism=Parallelism(executor="ray", reissue_after=None))
    from agentdescent.engine.calls.ray_runner import Runner
    from agentdescent.engine.calls.units import roll_out

    _, returned, error = Runner(1).one(roll_out, (local_ray.put(Unloadable()), reward, "", year_tasks()[0]))
    assert not returned and isinstance(error, UserError)  # a call sent anyway fails the run with the same words
    assert "sends run to Ray's workers, and they cannot load it (RuntimeError" in str(error)


def test_a_stopped_ray_executor_s_actors_remove_the_workspaces_its_tree_runner_kept(local_ray, tmp_path):
    """A stopped executor's actors were killed holding their copies of the runner, and the idle
    workspaces those kept stayed in the temporary folder for good."""
    from agentdescent import tree_runner
    from agentdescent.engine.calls.ray_executor import RayExecutor
    from agentdescent.engine.calls.units import roll_out

    runner = tree_runner(scripted(lambda prompt, cwd: "2026"), layout="root", workdir=tmp_path)
    pool = RayExecutor(2)
    rollout = pool.submit(roll_out, runner, reward, {"SKILL.md": "say the year"}, year_tasks()[0]).result(timeout=60)
    assert rollout.reward == 1.0 and len(list(tmp_path.iterdir())) == 1  # kept, clean, for the next rollout
    pool.abandon(RuntimeError("the run was cancelled"))  # its actors are killed, not kept warm
    assert list(tmp_path.iterdir()) == []


def test_without_ray_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(UserError, match=r'pip install "agentdescent\[ray\]"'):
        evolve(year_tasks(), reward, run=run, propose=propose, parallelism=Parallelism(executor="ray"))


def run_a_tenth_of_a_second(rendered: str, task: Task) -> str:
    time.sleep(0.1)
    return run(rendered, task)


def test_on_processes_a_rollout_waiting_for_a_free_process_is_not_run_twice_as_a_straggler():
    """The pool has a process a CPU; the straggler watcher took its 32 call slots for running ones,
    and re-ran a fifth of the calls that merely waited their turn."""
    result = evolve(year_tasks(24), reward, run=run_a_tenth_of_a_second, propose=propose, rounds=3, n_workers=4,
                    parallelism=Parallelism(executor="process", reissue_after=1.5), seed=3)
    assert result.error is None and result.usage.reissued == 0


def test_executors_on_a_cluster_the_first_of_them_started_leave_none_running_whatever_order_they_stop_in():
    """A pipelined run has three pools: the one that started the cluster shut it down, and the next
    one's goodbye to its actors started a fresh cluster that no one shut down. In a process of its
    own: this module's callers keep a cluster of theirs running."""
    pytest.importorskip("ray", reason='the Ray executor needs pip install "agentdescent[ray]"')
    program = ("import ray\nfrom agentdescent.engine.calls.ray_executor import RayExecutor\n"
               "first, second = RayExecutor(2), RayExecutor(2)\n"
               "assert first.submit(abs, -1).result(timeout=120) == 1 and second.submit(abs, -2).result(timeout=120) == 2\n"
               "first.shutdown()\nsecond.shutdown()\nprint('running' if ray.is_initialized() else 'none running')\n")
    # Ray's socket paths live under the temp folder, whose name here can pass the 107 bytes a socket's may have
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "TMPDIR": "/tmp"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "none running"


def test_a_local_cluster_ray_cannot_start_under_a_long_temp_folder_is_a_user_error_saying_what_to_set(tmp_path):
    """Ray keeps a local cluster's sockets in the temp folder, and a socket's path has at most 107
    bytes: Ray's OSError read as the run's own files being unwritable. In a process of its own, as above."""
    pytest.importorskip("ray", reason='the Ray executor needs pip install "agentdescent[ray]"')
    deep = tmp_path / ("t" * max(1, 110 - len(str(tmp_path))))
    deep.mkdir()
    program = ("from agentdescent import Task, UserError, evolve\nfrom agentdescent.config import Parallelism\n"
               "tasks = [Task(id=f't{i}', prompt='p') for i in range(8)]\n"
               "try:\n    evolve(tasks, lambda task, output: 1.0, run=lambda rendered, task: 'x', propose=lambda *a: None,"
               " rounds=1, parallelism=Parallelism(executor='ray'))\n"
               "except UserError as exc:\n    print(exc)\n")
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_TMPDIR", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**env, "TMPDIR": str(deep)})
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout.strip()
    assert said.startswith("executor='ray' could not start a local Ray cluster: Ray keeps its sockets under " + str(deep))
    assert said.endswith("set RAY_TMPDIR to a short folder (export RAY_TMPDIR=/tmp) and run again")


def test_a_wait_in_slices_outlasts_its_slices_where_futures_has_a_timeout_of_its_own(monkeypatch):
    """Before Python 3.11 a future's wait that runs out raises `concurrent.futures.TimeoutError`, not
    the builtin one: each slice of 0.2 s ended the wait, and so every run whose calls took longer."""
    from agentdescent.engine.calls import executors

    class Py310Timeout(Exception):  # futures.TimeoutError as Python 3.10 has it: no builtin TimeoutError
        pass

    runs_out = futures.TimeoutError  # what a wait that runs out raises on this Python

    class Sliced(futures.Future):
        def result(self, timeout=None):
            try:
                return super().result(timeout)
            except runs_out:
                raise Py310Timeout() from None

    monkeypatch.setattr(futures, "TimeoutError", Py310Timeout)
    future = Sliced()
    threading.Timer(3 * executors.WAKE_S, future.set_result, args=("answered",)).start()
    assert executors.result_of(future) == "answered"



def test_a_broken_pool_is_rebuilt_and_its_calls_sent_again_where_python_fails_them_under_its_lock(tmp_path, monkeypatch):
    """From Python 3.12 a pool a worker's death broke fails its futures holding the lock its submit
    and shutdown take, and what their callbacks did next (a new pool, the calls sent again) took
    it too: a deadlock, and a run hung for good. Python 3.12's way is emulated here on any Python."""
    from concurrent.futures import process

    terminate = process._ExecutorManagerThread.terminate_broken

    def under_its_lock(self, cause):  # as Python 3.12 does: the pool marked broken, its futures failed under its lock
        executor = self.executor_reference()
        if executor is not None:
            executor._broken, executor._shutdown_thread = "a child process terminated abruptly", True
        with self.shutdown_lock:
            broke = BrokenProcessPool("a process in the pool was terminated abruptly")
            for item in self.pending_work_items.values():
                item.future.set_exception(broke)
            self.pending_work_items.clear()
        terminate(self, cause)  # the rest as this Python does it
    monkeypatch.setattr(process._ExecutorManagerThread, "terminate_broken", under_its_lock)
    pool = ProcessExecutor(2, retries=1)
    try:
        killer = pool.submit(os._exit, 3)
        beside = pool.submit(wait_for_file, str(tmp_path / "killer gone"), 7, 10.0)
        with pytest.raises(BrokenProcessPool):
            killer.result(timeout=60)
        (tmp_path / "killer gone").touch()
        assert beside.result(timeout=60) == 7 and pool.restarts >= 1
        assert pool.submit(abs, -2).result(timeout=60) == 2  # the new pool serves
    finally:
        pool.shutdown(wait=False)
