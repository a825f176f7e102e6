"""The units of work that may run away from the driver: one rollout, one reflection.

Each takes plain data and the user's callables, counts the model calls made while it runs on a
meter of its own (and, in a process where no run is active, a worker process's, the calls made on
threads the callables started: `agents.base.catching_strays`), and returns a plain record with
what they spent. So usage travels back with the result, from a thread, a process or another
machine alike, and nothing here holds a lock, a cache or a future. What they leave out: caching
results and adding up usage, which the driver does where the results arrive (`Evaluator`,
`Worker`).
"""

from __future__ import annotations

import copy
import signal
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agentdescent import halts
from agentdescent.agents.base import ModelUsage, accepts_keyword, catching_strays, cut_off_at, metering
from agentdescent.artifacts.strategies import InvalidProposal
from agentdescent.errors import UserError
from agentdescent.quoting import bounded, described, quoted
from agentdescent.refcheck import reward_problem
from agentdescent.returned import as_text, problem
from agentdescent.types import Reflection, Rollout, Task, Tried

T = TypeVar("T")
KEPT_OUTPUT_CHARS = 100_000  # of a rollout's output, kept once it is scored (the reward saw all of it)
UNUSABLE = "the proposal is unusable: "  # how the reason of a propose that raised InvalidProposal begins
_ABANDONED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # threads of calls `within` gave up on
_SIGINT_SEEN: threading.Event | None = None  # in a worker process (`heed_sigint`): set once a SIGINT reached it


def roll_out(run: Callable[[Any, Task], str], reward: Callable[[Task, str], float], rendered: Any,
             task: Task, timeout: float | None = None) -> Rollout:
    """Run `task` on the rendered artifact and score it. A `run` or `reward` that raises, or takes
    longer than `timeout` seconds (then it is abandoned), is a failed rollout (reward 0, the error
    kept); a `UserError` (misconfiguration) and a reward that is not a number in [0, 1] (the
    caller's bug) are raised. An abandoned rollout's spend is what its model calls had cost by then."""
    meter = ModelUsage()

    def metered() -> Rollout:
        start = time.monotonic()
        with metering(meter), catching_strays(meter.add):
            output, value, error = _roll_out(run, reward, rendered, task)
        return Rollout(task=task, output=output, reward=value, error=error, spend=meter.seal(),
                       seconds=time.monotonic() - start)

    # abandoned, its meter stays open: the calls the cutoff ends land there, billed as the unit's one call at least
    late = f"the rollout of task {task.id!r} took longer than rollout_timeout={timeout:g} s and was abandoned" \
        if timeout is not None else ""
    return within(timeout, metered, lambda: Rollout(task=task, output="", reward=0.0, error=late, spend=meter.spent()))


def abandoned() -> int:
    """How many calls `within` gave up on are still running (each on a thread of its own)."""
    return len(abandoned_threads())


def abandoned_threads() -> set[threading.Thread]:
    """The threads of the calls `within` gave up on that are still running."""
    return {thread for thread in list(_ABANDONED) if thread.is_alive()}


def within(timeout: float | None, work: Callable[[], T], too_late: Callable[[], T]) -> T:
    """`work()`, or `too_late()` when it has not returned after `timeout` seconds (None: no limit).
    The model calls `work` makes through the shipped clients end by the limit too (`cut_off_at`),
    and none starts past it, nor after the caller's run stopped (its `halts.Halt` goes with the
    work). Past the limit, the rest of `work` goes on alone on a daemon thread: a thread cannot be
    killed, but it no longer holds up the run, nor the program's exit."""
    if timeout is None:
        return work()
    box: list[Any] = []
    at = time.monotonic() + timeout
    why = f"rollout_timeout={timeout:g} s, the limit of the rollout or reflection the call is part of"
    halt = halts.current()

    def call() -> None:
        entered = halts.enter(halt)
        try:
            with cut_off_at(at, why):
                box.append((True, work()))
        except BaseException as exc:  # carried back to the caller's thread
            box.append((False, exc))
        finally:
            halts.leave(entered)

    thread = threading.Thread(target=call, name="agentdescent-timed-call", daemon=True)
    thread.start()
    thread.join(max(0.0, at - time.monotonic()))
    if not box:
        _ABANDONED.add(thread)
        return too_late()
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _roll_out(run: Callable[[Any, Task], str], reward: Callable[[Task, str], float], rendered: Any,
              task: Task) -> tuple[str, float, str | None]:
    """(output, reward, why it failed)."""
    task = _own_copy(task)
    try:  # a tree is handed over as a copy, so that one rollout cannot change another's
        output = run(dict(rendered) if isinstance(rendered, dict) else rendered, task)
    except UserError:
        raise  # misconfiguration (a missing key, say) fails every rollout alike: stop and say so
    except Exception as exc:  # a failing rollout is data, not a crash of the run
        return "", 0.0, f"run failed on task {quoted(task.id, 80)}: {described(exc)}"
    except BaseException as exc:
        raise _exited("run", exc, task) from None
    output = as_text(output, "run", f" for task {quoted(task.id, 80)}")
    try:
        value = reward(task, output)
    except UserError:
        raise
    except Exception as exc:  # a judge, a grader or a reward that could not score: a failed rollout too
        return kept(output), 0.0, f"scoring failed on task {quoted(task.id, 80)}: {described(exc)}"
    except BaseException as exc:
        raise _exited("reward", exc, task) from None
    return kept(output), check_reward(value, task), None


def _own_copy(task: Task) -> Task:
    """The task a rollout's run and reward share: a copy, its meta copied deep, so that what they
    change (a `meta.pop`, say) reaches no other rollout nor the caller's tasks, with threads as
    with processes (which get a copy anyway)."""
    if not task.meta:
        return task.model_copy(update={"meta": {}})  # a fresh dict: a shallow copy would share the caller's
    try:
        meta = copy.deepcopy(task.meta)
    except Exception as exc:  # noqa: BLE001 -- an object of the caller's in meta that cannot be copied
        raise UserError(f"the meta of task {quoted(task.id, 80)} cannot be copied for a rollout ({described(exc)}); "
                        "give meta plain data (text, numbers, lists, dicts)") from None
    return task.model_copy(update={"meta": meta})


def _exited(who: str, exc: BaseException, task: Task) -> BaseException:
    """A call of the user's that raised what is not an Exception, and would end the run's process:
    sys.exit (a command's main() called in-process, say), what only ends a generator, an asyncio
    task's cancellation; each is a `UserError`, not a failed call. A KeyboardInterrupt on the main
    thread may be the user's Ctrl-C, and stays one; on any other thread it is the call's own
    (Python delivers SIGINT to the main thread only), as it is in a worker process that no SIGINT
    reached (`heed_sigint`)."""
    import asyncio  # here: only a call that raised past Exception needs it

    where = f"on task {quoted(task.id, 80)}"
    if isinstance(exc, KeyboardInterrupt):
        if threading.current_thread() is not threading.main_thread():
            return UserError(f"{who} raised KeyboardInterrupt {where}, on a worker thread where no Ctrl-C lands: it "
                             "must return its value, or raise an Exception for a call that failed")
        if _SIGINT_SEEN is not None and not _SIGINT_SEEN.is_set():
            return UserError(f"{who} raised KeyboardInterrupt {where}, in a worker process no Ctrl-C reached: it must "
                             "return its value, or raise an Exception for a call that failed")
        return exc
    if isinstance(exc, SystemExit):
        return UserError(f"{who} called sys.exit({exc.code!r}) {where}: it must return, not end the process (a "
                         "command's main() called in-process? run the command as a subprocess)")
    if isinstance(exc, GeneratorExit):
        return UserError(f"{who} raised GeneratorExit {where}, which ends a generator, not a call: it must return its "
                         "value, or raise an Exception")
    if isinstance(exc, asyncio.CancelledError):
        return UserError(f"{who} raised CancelledError {where}: an asyncio task it ran was cancelled, and that is no "
                         "Exception, so it would end the run; catch it there and return a value, or raise an "
                         "Exception for a call that failed")
    return UserError(f"{who} raised {described(exc)} {where}, a BaseException that is no Exception, so it would end the "
                     "run: it must return its value, or raise an Exception for a call that failed")


def heed_sigint() -> None:
    """Where a worker process starts: a SIGINT is noted as it raises KeyboardInterrupt, so that a
    Ctrl-C (it reaches the worker processes, in the terminal's process group) stays one, and a
    KeyboardInterrupt a call raised itself is that call's error, as it is on a worker thread."""
    global _SIGINT_SEEN
    seen = _SIGINT_SEEN = threading.Event()

    def interrupted(signum: int, frame: object) -> None:
        seen.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)


def crashed(unit: Callable[..., Any], args: tuple[Any, ...], why: str) -> Rollout | Reflection | None:
    """What a unit whose process died (killed, out of memory, `os._exit` in the user's code) comes
    to: a failed rollout, or an `error` reflection, as a unit that raised does; None for a callable
    that is not a unit of this module."""
    if unit is roll_out:
        return Rollout(task=args[3], output="", reward=0.0, error=f"run failed on task {quoted(args[3].id, 80)}: {why}")
    if unit is reflect:
        return Reflection(failed="error", reason=f"propose failed: {why}")
    return None


def kept(output: str) -> str:
    """What a rollout keeps of its output once it is scored: all of it up to `KEPT_OUTPUT_CHARS`,
    else its start and end, so that a runaway agent does not fill the journal and the memory
    (a reflection reads far less of it). kept("x" * 10) == "x" * 10"""
    if len(output) <= KEPT_OUTPUT_CHARS:
        return output
    half = KEPT_OUTPUT_CHARS // 2
    return f"{output[:half]}\n[… {len(output) - 2 * half:,} characters left out …]\n{output[-half:]}"


def check_reward(value: object, task: Task) -> float:
    """`value` as a float in [0, 1]: any real number (bool, int, float, Fraction, Decimal, a numpy
    scalar); a str, None, NaN or a number outside [0, 1] is a `UserError` that says so (in the
    words plan uses for a scorer it tries: `refcheck.reward_problem`)."""
    problem = reward_problem(value, task.id)
    if problem is not None:
        raise UserError(problem)
    return float(value)  # type: ignore[arg-type]


def reflect(propose: Callable[..., str | None], rendered: Any, chosen: Sequence[Rollout],
            timeout: float | None = None, tried: Sequence[Tried] = ()) -> Reflection:
    """One proposal from one failure, or from all of `chosen` when `propose` has a callable
    `batch(rendered, rollouts)`; `tried` (the run's refusals) goes to whichever takes a `tried`
    keyword. A proposal that is not a str (or None) is the caller's bug and
    raises `UserError`, as does a `UserError` from `propose`; anything else it raises, and a call
    longer than `timeout` seconds (abandoned, with what its model calls had cost by then), is recorded."""
    meter = ModelUsage()

    def metered() -> Reflection:
        with metering(meter), catching_strays(meter.add):
            reflection = _reflect(propose, rendered, chosen, tried)
        return reflection.model_copy(update={"spend": meter.seal()})

    late = f"propose took longer than rollout_timeout={timeout:g} s and was abandoned" if timeout is not None else ""
    return within(timeout, metered, lambda: Reflection(failed="error", reason=late, spend=meter.spent()))


def _reflect(propose: Callable[..., str | None], rendered: Any, chosen: Sequence[Rollout],
             tried: Sequence[Tried]) -> Reflection:
    chosen = [rollout.model_copy(update={"task": _own_copy(rollout.task)}) for rollout in chosen]  # as a rollout's
    batch = getattr(propose, "batch", None)
    try:
        if callable(batch):
            told = {"tried": list(tried)} if tried and takes_tried(batch) else {}
            proposal = batch(rendered, list(chosen), **told)
        else:
            (rollout,) = chosen
            told = {"tried": list(tried)} if tried and takes_tried(propose) else {}
            proposal = propose(rendered, rollout.task, rollout.output, rollout.reward, **told)
    except UserError:
        raise  # misconfiguration: every proposal would fail alike
    except InvalidProposal as exc:
        return Reflection(failed="invalid", reason=f"{UNUSABLE}{bounded(str(exc))}")
    except Exception as exc:  # one failed reflection is an outcome, not the end of the run
        return Reflection(failed="error", reason=f"propose raised {described(exc)}")
    except BaseException as exc:
        raise _exited("propose", exc, chosen[0].task) from None
    if proposal is not None and not isinstance(proposal, str):
        raise UserError(problem(proposal, "propose", f" for task {quoted(chosen[0].task.id, 80)}",
                                what="the proposed change (or None: no proposal)", strict=True))
    return Reflection(proposal=proposal)


def takes_tried(propose: Callable) -> bool:
    """Whether `propose` accepts a `tried` keyword (it is handed the run's refusals then)."""
    return accepts_keyword(propose, "tried", unknown=False)
