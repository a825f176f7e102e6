"""The Ray executor's actor: it runs the calls of the batches sent to it on threads of its own and
streams their answers back as they finish. Left out: what is sent to it, and when
(`ray_executor`).
"""

from __future__ import annotations

import inspect
import queue
import re
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentdescent.errors import UserError
from agentdescent.quoting import described, quoted, text_of

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

    def load(self, stored: dict[str, Any]) -> BaseException | None:
        """Load the callables `stored` ({name: object-store ref}) as the calls will: None, or the
        `UserError` that names the first one this worker cannot load."""
        for name, ref in stored.items():
            try:
                self._resolve(ref)
            except Exception as exc:  # noqa: BLE001 -- its module or its __setstate__ may raise anything
                return unloadable(exc, name)
        return None

    def _one(self, index: int, fn: Callable[..., Any], args: tuple) -> Answer:
        resolved = []
        for place, arg in enumerate(args):
            try:
                resolved.append(self._resolve(arg))
            except Exception as exc:  # noqa: BLE001 -- the user's callable cannot be loaded here: no call of it can run
                return index, False, unloadable(exc, _parameter(fn, place))
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


def unloadable(exc: BaseException, name: str) -> UserError:
    """What a call whose callable `name` this worker cannot load fails with: a `UserError` naming
    it, the cause and the fix (for a module it cannot import, how to give it to Ray's workers)."""
    cause = getattr(exc, "client_exc", exc)  # a RaySystemError wraps what the unpickling raised
    why = described(cause) if isinstance(cause, BaseException) else quoted(cause)
    found = re.search(r"No module named '([\w.]+)'", text_of(cause))
    if found is None:
        return UserError(
            f"executor='ray' sends {name} to Ray's workers, and they cannot load it ({why}): it pickles here, but not "
            "where Ray runs it; make what it needs as it is loaded (its module, a file, an environment variable its "
            "__setstate__ reads) be there too, or use executor='thread'")
    module = found.group(1).split(".")[0]
    return UserError(
        f"executor='ray': Ray's workers cannot import {quoted(module, 80)}, where this run's {name} is defined "
        "(this process finds it on its own sys.path, Ray's workers do not); install it where Ray runs "
        f"(pip install it on every node), or hand it to Ray before evolve: ray.init(runtime_env={{'py_modules': "
        f"[{module}]}}) or runtime_env={{'working_dir': '.'}}; or use executor='thread'")


def _parameter(fn: Callable[..., Any], place: int) -> str:
    """The name of `fn`'s parameter at `place` (a unit's `run`, `reward` or `propose`)."""
    try:
        return list(inspect.signature(fn).parameters)[place]
    except (TypeError, ValueError, IndexError):
        return "callable"


def _portable(exc: BaseException) -> BaseException:
    """`exc`, or a RuntimeError saying what it was when it cannot travel back."""
    import ray

    try:
        ray.cloudpickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {text_of(exc)}")
