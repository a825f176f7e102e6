"""The Ray executor's actor: it runs the calls of the batches sent to it on threads of its own and
streams their answers back as they finish. Left out: what is sent to it, and when
(`ray_executor`).
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentdescent.errors import UserError
from agentdescent.quoting import quoted, text_of

# Answers that come in within this long of the first one go back as one message: each message is
# a hop through Ray, and calls sent together mostly finish together.
GATHER_S = 0.002
Answer = tuple[int, bool, Any]  # (the call's place in its batch, whether it returned, what it returned or raised)


class Runner:
    """The actor: runs a batch's calls on its own threads (at most `threads` at once, over all its
    batches) and yields, as they finish, the answers that are in (those that come within `GATHER_S` of
    the first, together)."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="agentdescent-ray-call")
        self._objects: dict[Any, Any] = {}  # an object-store ref -> what it holds (the user's callables)

    def run(self, calls: Sequence[tuple[Callable[..., Any], tuple]]) -> Iterator[list[Answer]]:
        answers: queue.SimpleQueue[Answer] = queue.SimpleQueue()
        for index, (fn, args) in enumerate(calls):
            self._pool.submit(self._one, index, fn, args).add_done_callback(lambda done: answers.put(done.result()))
        left = len(calls)
        while left:
            batch = [answers.get()]
            until = time.monotonic() + GATHER_S
            while len(batch) < left:
                try:
                    batch.append(answers.get(timeout=max(0.0, until - time.monotonic())))
                except queue.Empty:
                    break
            left -= len(batch)
            yield batch

    def one(self, fn: Callable[..., Any], args: tuple) -> Answer:
        """A batch of one, answered as a plain call: a stream costs Ray a millisecond more."""
        return self._one(0, fn, args)

    def _one(self, index: int, fn: Callable[..., Any], args: tuple) -> Answer:
        try:
            resolved = tuple(self._resolve(a) for a in args)
        except Exception as exc:  # the user's callables cannot be loaded here: no call of them can run
            return index, False, unloadable(exc)
        try:
            return index, True, fn(*resolved)
        except BaseException as exc:  # the call's own failure (SystemExit too): an answer, not the batch's end
            return index, False, _portable(exc)

    def forget(self) -> None:
        """Let go of the callables kept so far: the executor that sent them is done."""
        self._objects = {}

    def _resolve(self, value: Any) -> Any:
        import ray

        if not isinstance(value, ray.ObjectRef):
            return value
        objects = self._objects  # one dict, though `forget` swaps it meanwhile
        if value not in objects:
            objects[value] = ray.get(value)
        return objects[value]


def unloadable(exc: BaseException) -> BaseException:
    """What a call whose callables this worker cannot load fails with: where the cause is a
    module it cannot import, a `UserError` naming it and how to give it to Ray's workers."""
    found = re.search(r"No module named '([\w.]+)'", text_of(exc))
    if found is None:
        return _portable(exc)
    module = found.group(1).split(".")[0]
    return UserError(
        f"executor='ray': Ray's workers cannot import {quoted(module, 80)}, where this run's run, reward or propose "
        "is defined (this process finds it on its own sys.path, Ray's workers do not); install it where Ray runs "
        f"(pip install it on every node), or hand it to Ray before evolve: ray.init(runtime_env={{'py_modules': "
        f"[{module}]}}) or runtime_env={{'working_dir': '.'}}; or use executor='thread'")


def _portable(exc: BaseException) -> BaseException:
    """`exc`, or a RuntimeError saying what it was when it cannot travel back."""
    import ray

    try:
        ray.cloudpickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {text_of(exc)}")
