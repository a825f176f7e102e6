"""The Ray executor: rollouts and reflections on a Ray cluster, the ledger and the aggregator here.

Calls go to threaded actors (one a node), in batches: whatever was submitted while the last
batch was being sent goes out as one call per actor, as far as the actors have threads free for
it, and the actor (`ray_runner`) streams the results back, each message carrying the calls that
finished since its last one (a batch of one is a plain call: a stream costs Ray more). The rest
waits here, with the driver, so a call sent to an actor starts at once: that is where `on_start`
is called, and what still waits at a shutdown never starts. Each message is a hop through Ray, so a wave sent in batches
answers far sooner than one sent call by call (`bench/ray_overhead.py` measures both). No CPU is
reserved: a call mostly waits on a model, and a plain Ray task would hold a whole CPU while it waits.

What crosses is a unit of `units` with the user's callables (cloudpickled, so closures travel;
`ray_cluster.check_serializable` names one that does not; each goes to the object store once) and the plain
record it returns, usage included; each call's future completes as its result lands, so results
come back in the order they finish. An actor that dies mid-batch (its node lost, its process
killed) is restarted by Ray, and the calls of its batch still unanswered are sent again, one at
a time, to an actor of their own that nothing else is sent to: the call that killed it (a crash
in the user's code) must not take the others with it, there or on the actors the run goes on with.

`ray.init` joins the cluster `RAY_ADDRESS` names, and starts a local one otherwise; a cluster
this executor started is shut down with it, one the caller started is left running, and so are
the actors of an executor that shut down cleanly: the next executor of this process on that
cluster takes them back warm (`ray_idle`), since a new actor waits 0.4 to 1 s for a Ray worker
process to start, a tenth of a short run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin one before Python 3.11
from dataclasses import dataclass
from typing import Any, TypeVar

from agentdescent.engine.calls.executors import Outstanding, left_running, result_of, settle, starts
from agentdescent.engine.calls.ray_cluster import connect, ray_module
from agentdescent.engine.calls.ray_idle import IDLE
from agentdescent.engine.calls.ray_runner import Runner, unloadable
from agentdescent.engine.calls.units import crashed

T = TypeVar("T")
R = TypeVar("R")

# The most calls one actor runs at once: Ray starts all of an actor's threads as it starts the
# actor, and one asked for tens of thousands never came up. Past it, calls wait with the driver.
ACTOR_THREADS = 1024
RESTART_POLL_S = 0.2  # how often the actors are asked whether they are back, after one died
RESTART_WAIT_S = 60.0  # how long calls wait for a dead actor to be back before they go again anyway
LET_GO_S = 2.0  # how long a stopping executor waits for its actors to drop its callables


@dataclass(eq=False)
class _Call:
    future: Future
    fn: Callable[..., Any]
    args: tuple
    then: Callable[[Any], Any] | None
    sent: int = 0  # how many times it went out (again after its actor died)
    actor: int | None = None  # the actor whose thread it holds, while it does


class RayExecutor:
    def __init__(self, max_workers: int, *, name: str = "agentdescent", actors: int | None = None,
                 retries: int = 2, on_start: Callable[[], None] | None = None) -> None:
        """`actors`: how many (default: one a node of the cluster, spread over them; on a small
        machine a second actor costs more than it brings); each runs at most `ACTOR_THREADS` calls
        at once, so `width` is at most that many times `actors`. `retries`: how often a call whose
        actor died is sent again."""
        ray = self._ray = ray_module()
        self._started = connect(ray)
        if actors is None:
            actors = max(1, sum(1 for node in ray.nodes() if node.get("Alive")))
        per_actor = self._per_actor = max(1, min(ACTOR_THREADS, -(-max_workers // actors)))
        self.width = per_actor * actors
        self._job = ray.get_runtime_context().get_job_id()
        # each batch or single call holds one of an actor's threads (at most per_actor), and a few spare
        # answer `__ray_ready__` and `forget`; a batch's calls run on the actor's own pool of per_actor
        runner = ray.remote(num_cpus=0, max_concurrency=per_actor + 8, max_restarts=-1, max_task_retries=0,
                            scheduling_strategy="SPREAD")(Runner)
        kept = [] if self._started else IDLE.take(self._job, per_actor, actors)
        self._actors = kept + [runner.remote(per_actor) for _ in range(actors - len(kept))]
        self._runner = runner
        self._apart: Any = None  # the actor calls sent again run on, one at a time (made for the first)
        self._retries = retries
        self._on_start = on_start  # called as each call is handed to an actor thread that is free for it
        self._next = 0  # the actor the next batch starts from
        self._lock = threading.Lock()  # the stored callables
        self._alone = threading.Lock()  # held while a call whose actor died is sent again on its own
        self._wake = threading.Condition()  # the calls waiting to be sent, the actors' free threads, the sender
        self._waiting: list[_Call] = []
        self._free = [per_actor] * actors  # each actor's threads that hold no call: a call sent to one starts at once
        self._sender: threading.Thread | None = None
        self._closed = False
        self._outstanding = Outstanding()
        self._stored: dict[int, tuple[object, Any]] = {}  # id of a callable -> (it, its ref in the object store)

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        future: Future[R] = self._outstanding.new()
        sent = tuple(self._store(a) if callable(a) else a for a in args)
        self._send_later([_Call(future=future, fn=fn, args=sent, then=then)])
        return future

    def load(self, **callables: object) -> None:
        """A `UserError` naming the first of `callables` an actor cannot load, before any call (`ProcessExecutor.load`)."""
        error = self._outstanding.closed  # abandoned already (a cancel): a Ray it stopped would start again
        try:
            error = error or result_of(self._actors[0].load.remote({n: self._store(fn) for n, fn in callables.items()}).future())
        except Exception as exc:  # its actor died: killed by a cancel (say so), or by what it loaded
            error = self._outstanding.closed or unloadable(_cause(exc), ", ".join(callables))
        if error is not None:
            raise error

    def _send_later(self, calls: list[_Call]) -> None:
        with self._wake:
            self._waiting.extend(calls)
            if self._sender is None:
                self._sender = threading.Thread(target=self._send_loop, name="agentdescent-ray-sender", daemon=True)
                self._sender.start()
            self._wake.notify()

    def _send_loop(self) -> None:
        """Send what is waiting, as much of it as the actors have free threads for, at once: what
        arrives meanwhile is the next batch."""
        while True:
            with self._wake:
                while not self._closed and not (self._waiting and any(self._free)):
                    self._wake.wait()
                if self._closed:
                    return
                calls = self._place(self._waiting)
                self._waiting = self._waiting[len(calls):]
            try:
                self._send(calls)
            except BaseException as exc:  # no thread to receive with, say: these calls fail, the sender goes on
                for call in calls:
                    self._release(call)
                    settle(call.future, error=exc)

    def _place(self, calls: list[_Call]) -> list[_Call]:
        """The first of `calls`, each given a free thread of an actor, round the actors; callers
        hold `_wake`."""
        placed, n = [], len(self._actors)
        for call in calls:
            actor = next((k % n for k in range(self._next, self._next + n) if self._free[k % n]), None)
            if actor is None:
                break
            self._free[actor] -= 1
            call.actor, self._next = actor, actor + 1
            placed.append(call)
        return placed

    def _release(self, call: _Call) -> None:
        """`call` no longer holds its actor's thread."""
        with self._wake:
            if call.actor is not None:
                self._free[call.actor] += 1
                call.actor = None
                self._wake.notify_all()

    def _start(self, call: _Call) -> bool:
        """Whether `call` starts (`executors.starts`)."""
        if not starts(call.future, self._on_start, first=call.sent == 0):
            return False
        call.sent += 1
        return True

    def _send(self, calls: list[_Call]) -> None:
        by_actor: dict[int, list[_Call]] = {}
        for call in calls:
            actor = call.actor
            if actor is not None and self._start(call):
                by_actor.setdefault(actor, []).append(call)
            else:
                self._release(call)
        for index, chunk in by_actor.items():
            actor = self._actors[index]
            try:
                if len(chunk) == 1:
                    landed = actor.one.remote(chunk[0].fn, chunk[0].args).future()
                    landed.add_done_callback(lambda done, chunk=chunk: self._landed(chunk, done))
                    continue
                stream = actor.run.options(num_returns="streaming").remote([(c.fn, c.args) for c in chunk])
            except Exception as exc:  # the cluster is gone
                for call in chunk:
                    self._release(call)
                    settle(call.future, error=exc)
                continue
            threading.Thread(target=self._receive, args=(stream, chunk), name="agentdescent-ray-receiver",
                             daemon=True).start()

    def _receive(self, stream: Any, chunk: list[_Call]) -> None:
        answered: set[int] = set()
        try:
            for ref in stream:
                for index, returned, value in self._ray.get(ref):
                    answered.add(index)
                    self._finish(chunk[index], returned, value)
                    self._release(chunk[index])
        except Exception as exc:  # the actor died mid-batch: what it had not answered goes again
            owed = [c for i, c in enumerate(chunk) if i not in answered]
            for call in owed:
                self._release(call)
            self._again(owed, exc)

    def _landed(self, chunk: list[_Call], landed: Future) -> None:
        try:
            _, returned, value = landed.result()
        except Exception as exc:  # the actor died mid-call
            self._release(chunk[0])
            self._again(chunk, exc)
            return
        self._finish(chunk[0], returned, value)
        self._release(chunk[0])

    def _again(self, calls: list[_Call], error: BaseException) -> None:
        """Send `calls` again, whose actor died before it answered them, once Ray has it back;
        past the retries, fail them."""
        again = []
        for call in calls:
            if call.future.done():
                continue
            if call.sent > self._retries:
                self._crashed(call, error)
            else:
                again.append(call)
        if again:  # a thread of its own: this may be Ray's callback thread, which must not wait
            threading.Thread(target=self._send_when_back, args=(again,), name="agentdescent-ray-resend",
                             daemon=True).start()

    def _crashed(self, call: _Call, error: BaseException) -> None:
        """A call whose actor died under it each time: a unit of `units` (a rollout, a reflection)
        comes to a failed one, as a process executor's does; any other fails with the cause."""
        fallback = crashed(call.fn, call.args, f"the Ray actor running it died, {call.sent} times (killed, out of "
                                               "memory, os._exit or a crash in the code it ran)")
        if fallback is None:
            settle(call.future, error=_cause(error))
            return
        try:
            settle(call.future, result=call.then(fallback) if call.then is not None else fallback)
        except BaseException as exc:  # the driver's own `then` failed: the waiter hears of it
            settle(call.future, error=exc)

    def _send_when_back(self, calls: list[_Call]) -> None:
        """Send `calls` again one at a time, each once the actor kept apart for them is back (one Ray
        is restarting refuses what is sent to it meanwhile, and a refusal would cost a call a try):
        any of them may be the one that killed its actor, and sent with others, the one that kills
        it every time would fail them with it."""
        with self._alone:  # one at a time across every actor death
            for call in calls:
                if not self._closed and not call.future.done():
                    self._send_alone(call)

    def _send_alone(self, call: _Call) -> None:
        """Send `call` on its own to the actor apart, and wait until it lands (at most
        `RESTART_WAIT_S`: one that hangs lets the others go on)."""
        try:
            apart = self._apart_when_back()
        except Exception as exc:  # the cluster is gone
            settle(call.future, error=exc)
            return
        if self._closed or not self._start(call):
            return
        try:
            landed = apart.one.remote(call.fn, call.args).future()
        except Exception as exc:  # the cluster is gone
            settle(call.future, error=exc)
            return
        try:
            _, returned, value = landed.result(timeout=RESTART_WAIT_S)
        except FutureTimeout:
            landed.add_done_callback(lambda done: self._landed([call], done))
            return
        except Exception as exc:  # it died again
            self._again([call], exc)
            return
        self._finish(call, returned, value)

    def _apart_when_back(self) -> Any:
        """The actor apart (made the first time, restarted by Ray after each death as the others
        are), once it answers, or after `RESTART_WAIT_S` of waiting for it."""
        if self._apart is None:
            self._apart = self._runner.remote(1)
        deadline = time.monotonic() + RESTART_WAIT_S
        while not self._closed and time.monotonic() < deadline:
            try:
                self._ray.get(self._apart.__ray_ready__.remote(), timeout=RESTART_WAIT_S)
                break
            except Exception:  # still restarting
                time.sleep(RESTART_POLL_S)
        return self._apart

    def _finish(self, call: _Call, returned: bool, value: Any) -> None:
        if call.future.done():  # abandoned meanwhile
            return
        if not returned:
            settle(call.future, error=value)
            return
        try:
            settle(call.future, result=call.then(value) if call.then is not None else value)
        except BaseException as exc:  # the driver's `then`
            settle(call.future, error=exc)

    def _store(self, fn: object) -> Any:
        """The user's callables go to the object store once, not pickled again with every call."""
        with self._lock:
            kept = self._stored.get(id(fn))
            if kept is None or kept[0] is not fn:
                kept = self._stored[id(fn)] = (fn, self._ray.put(fn))
            return kept[1]

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> int:
        """See `Executor`; the calls still running past `timeout` go with the actors."""
        unfinished = self._outstanding.close()
        with self._wake:
            queued, self._waiting = self._waiting, []
        for call in queued:  # never started
            if call.future.cancel():
                call.future.set_running_or_notify_cancel()  # `futures.wait` counts only a notified cancel as done
        left = left_running(unfinished, wait=wait, timeout=timeout)
        self._stop(keep=not left)
        return left

    def abandon(self, error: BaseException) -> None:
        self._outstanding.abandon(error)
        self._stop(keep=False)

    def _stop(self, *, keep: bool) -> None:
        """Stop sending. Actors with nothing left running on a cluster the caller keeps go to
        `ray_idle.IDLE`; the others (a call may still hold their threads) are killed."""
        with self._wake:
            if self._closed:
                return
            self._closed = True
            self._wake.notify_all()
        if not self._started and not self._ray.is_initialized():
            return  # the executor that started the cluster shut it down: a call to an actor would start another
        if not self._let_go([*self._actors, *([self._apart] if self._apart is not None else [])]):
            return  # its cluster is gone: no one will take its actors back anyway
        doomed = self._actors
        if self._apart is not None:  # it met a call that killed its actor: never kept warm
            self._kill([self._apart])
        if keep and not self._started:
            doomed = IDLE.give(self._job, self._per_actor, self._actors)
        self._kill(doomed)
        if self._started:
            self._ray.shutdown()
            self._started = False

    def _let_go(self, actors: Sequence[Any]) -> bool:
        """Have `actors` drop this executor's callables, and what those keep (a tree_runner's idle workspaces); False: no cluster."""
        try:
            self._ray.wait([actor.forget.remote() for actor in actors], num_returns=len(actors), timeout=LET_GO_S)
        except Exception:  # its cluster is gone
            return False
        return True

    def _kill(self, actors: Sequence[Any]) -> None:
        for actor in actors:
            with contextlib.suppress(Exception):  # already gone with its cluster
                self._ray.kill(actor)


def _cause(exc: BaseException) -> BaseException:
    """The error the call raised on its worker, rather than Ray's wrapper of it."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
