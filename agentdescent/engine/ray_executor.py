"""The Ray executor: rollouts and reflections on a Ray cluster, the ledger and the aggregator here.

Calls go to a few threaded actors (`max_concurrency` calls each, no CPU reserved: a call mostly
waits on a model, and a plain Ray task would hold a whole CPU while it waits). What crosses is a
unit of `units` with the user's callables (cloudpickled, so closures travel; `check_serializable`
names one that does not) and the plain record it returns, usage included; each call's future
completes as its result lands, so results stream back in the order they finish. An actor that dies mid-call (its node lost, its
process killed) is restarted by Ray and the call re-run on it (`max_task_retries`).

`ray.init` joins the cluster `RAY_ADDRESS` names, and starts a local one otherwise; a cluster
this executor started is shut down with it, one the caller started is left running.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from agentdescent.engine.executors import Outstanding, settle
from agentdescent.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

INSTALL = 'executor="ray" needs Ray: pip install "agentdescent[ray]"'


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL) from None
    return ray


def check_serializable(**callables: object) -> None:
    """Raise a `UserError` naming the first of `callables` that Ray cannot send to its workers."""
    ray = _ray()
    for name, fn in callables.items():
        try:
            ray.cloudpickle.dumps(fn)
        except Exception as exc:
            raise UserError(f"executor='ray' sends {name} to Ray's workers, and it cannot be serialized "
                            f"({type(exc).__name__}: {exc}); a callable holding a lock, a thread or an open "
                            f"client cannot travel: create those inside it, or use executor='thread'") from None


class _Runner:
    """The actor: runs one unit of work per call, many at once on its threads."""

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


class RayExecutor:
    def __init__(self, max_workers: int, *, name: str = "agentdescent", actors: int = 2) -> None:
        ray = self._ray = _ray()
        self._started = not ray.is_initialized()
        if self._started:  # RAY_ADDRESS (read by ray.init) joins a cluster; none starts a local one
            local = {} if os.environ.get("RAY_ADDRESS") else {"num_cpus": os.cpu_count() or 1}
            ray.init(include_dashboard=False, log_to_driver=False, **local)
        per_actor = max(1, -(-max_workers // actors))
        runner = ray.remote(num_cpus=0, max_concurrency=per_actor, max_restarts=-1, max_task_retries=2)(_Runner)
        self._actors = [runner.remote() for _ in range(actors)]
        self._next = 0
        self._lock = threading.Lock()  # the next actor, the stored callables
        self._outstanding = Outstanding()
        self._stored: dict[int, tuple[object, Any]] = {}  # id of a callable -> (it, its ref in the object store)

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        future: Future[R] = self._outstanding.new()
        future.set_running_or_notify_cancel()
        with self._lock:
            actor = self._actors[self._next % len(self._actors)]
            self._next += 1
        sent = [self._store(a) if callable(a) else a for a in args]
        landed = actor.call.remote(fn, *sent).future()  # completes as the result lands, in any order
        landed.add_done_callback(lambda done: self._finish(future, then, done))
        return future

    def _store(self, fn: object) -> Any:
        """The user's callables go to the object store once, not pickled again with every call."""
        with self._lock:
            kept = self._stored.get(id(fn))
            if kept is None or kept[0] is not fn:
                kept = self._stored[id(fn)] = (fn, self._ray.put(fn))
            return kept[1]

    def shutdown(self, *, wait: bool = True) -> None:
        unfinished = self._outstanding.close()
        if wait:
            for future in unfinished:
                try:
                    future.exception()
                except Exception:  # cancelled
                    pass
        self._stop()

    def abandon(self, error: BaseException) -> None:
        self._outstanding.abandon(error)
        self._stop()

    def _stop(self) -> None:
        for actor in self._actors:
            try:
                self._ray.kill(actor)
            except Exception:  # already gone with its cluster
                pass
        if self._started:
            self._ray.shutdown()
            self._started = False

    def _finish(self, future: Future, then: Callable[[Any], Any] | None, landed: Future) -> None:
        if future.done():  # abandoned meanwhile
            return
        try:
            result = landed.result()
            settle(future, result=then(result) if then is not None else result)
        except BaseException as exc:  # the call raised there, or the driver's `then` here
            settle(future, error=_cause(exc))


def _cause(exc: BaseException) -> BaseException:
    """The error the call raised on its worker, rather than Ray's wrapper of it."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
