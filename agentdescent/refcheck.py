"""Checking `python:` refs (`module:attribute`) without running the user's code in this process.

A spec may name a module of the user's own (an agent, a reflector, a reward). Importing it runs
its code, which may print (the MCP server's stdout is its protocol stream), hang, or change this
process for good. So `check_refs` imports each ref in a child process instead:

    check_refs(["tests.keyword_domain:answer", "this:s"])
    == {"tests.keyword_domain:answer": None, "this:s": "'s' is a value of type str, not a function ...; it printed: ..."}

Each ref's child is `python -m agentdescent.refcheck PARENT_PID ORIGIN RESULT_FILE REF` (this copy
of the package first on its PYTHONPATH, so that it speaks the same arguments), started in a folder
of its own so that a module planted in the user's folder (a `json.py`) cannot stand in for one the
check itself needs; once those are imported it moves to `cwd` (default the current folder) and puts
it first on `sys.path`, as the run's own process does. Its stdin is /dev/null; it runs in its own
process group, killed with the group after `timeout` seconds. A check never outlives the process
that asked for it, however that one ended (SIGTERM, SIGHUP, SIGKILL): the child watches its parent
and, once it is gone, removes the scratch folder and kills its own group (`_orphaned`). Its verdict
is the JSON file it writes after the import, so nothing the user's module prints can pass for one;
what it printed (stdout and stderr, the last `OUTPUT_BYTES` kept) is quoted, redacted, in a
failure. This module lives outside `agentdescent.runs` so that the child imports next to nothing
of ours. `check_call` goes one step further for a reward: its child calls the ref once, as
`ref(task, output)`, and says what it raised or returned that is not a number in [0, 1], in the
words the run would stop with (`reward_problem`). For a run whose executor sends its callables
to other processes, `check_refs(..., executor=...)` also pickles each as that executor would.
Left out: calling an agent or a reflector (only the run's own process does).
"""

from __future__ import annotations

import contextlib
import decimal
import functools
import importlib
import json
import math
import numbers
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from agentdescent.returned import ASYNC_GIVEN, unfinished

CHILD_MODULE = "agentdescent.refcheck"
REF_CHECK_SECONDS = 30.0
OUTPUT_BYTES = 16_000  # the tail of what the child printed, kept for a failure's message
QUOTED_CHARS = 120  # of that tail, quoted in a failure
SCRATCH_PREFIX = "agentdescent-refcheck-"  # the checks' scratch folders in the temp folder (runs --prune knows it)
PARENT_POLL_SECONDS = 0.2  # how often the child looks whether its parent is still there
_REASON_CHARS = 200
SENT_BY = "--sent-by"  # the child's flag: the executor that will send the ref to other processes
UNPICKLABLE = "it loads, but cannot be pickled: "  # how a verdict on a ref that does not travel begins


def check_call(ref: str, task: dict, output: str, *, cwd: str | os.PathLike | None = None,
               timeout: float = REF_CHECK_SECONDS) -> str | None:
    """None when the reward `ref` names, imported in a child process and called once as
    `ref(Task(**task), output)`, returns a number in [0, 1] (what the run takes), or is a model
    judge (`scoring.Judge`, not called: that would be a model call); else why not (what it raised
    or returned, in the run's words, then a redacted excerpt of what it printed)."""
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as folder:
        call = Path(folder, "call.json")
        call.write_text(json.dumps({"task": task, "output": output}), encoding="utf-8")
        child = _Child(ref, Path(folder, "result.json"), Path(cwd or os.getcwd()), call)
        return child.verdict(time.monotonic() + timeout, timeout)


def check_refs(refs: Sequence[str], *, cwd: str | os.PathLike | None = None, timeout: float = REF_CHECK_SECONDS,
               executor: str = "thread") -> dict[str, str | None]:
    """Each of `refs` mapped to None when it imports in a child process and names something
    callable (that pickles, for an `executor` that sends it to other processes: "process" or
    "ray"), else to why not (the exception, or how the child ended, then a redacted excerpt of
    what it printed). Each ref has a child of its own, all started at once and given `timeout`
    seconds in all; raises nothing for a bad ref."""
    refs = list(dict.fromkeys(refs))
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as folder:
        origin = Path(cwd or os.getcwd())
        sent = [SENT_BY, executor] if executor != "thread" else []
        children = {ref: _Child(ref, Path(folder, f"{i}.json"), origin, sent) for i, ref in enumerate(refs)}
        until = time.monotonic() + timeout
        return {ref: child.verdict(until, timeout) for ref, child in children.items()}


class _Child:
    """One ref's check: the process importing it, and the tail of what it printed."""

    def __init__(self, ref: str, result: Path, origin: Path, then: Path | list[str] | None = None) -> None:
        """`then`: the call file of a reward to call, or `[SENT_BY, executor]`."""
        self.result, self.kept, self.unstarted = result, bytearray(), None
        argv = [sys.executable, "-m", CHILD_MODULE, str(os.getpid()), str(origin), str(result), ref,
                *([str(then)] if isinstance(then, Path) else then or [])]
        try:
            self.proc = subprocess.Popen(argv, cwd=result.parent, env=_our_package_first(),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as exc:  # too many processes, a cwd gone: this ref cannot be checked, say why
            self.unstarted = f"cannot start a process to check it ({exc.strerror or exc}); try again"
            return
        self.reader = threading.Thread(target=_drain, args=(self.proc.stdout, self.kept), daemon=True,
                                       name="agentdescent-refcheck")
        self.reader.start()

    def verdict(self, until: float, timeout: float) -> str | None:
        """None when the ref loads, else why not; the child and its group are gone on return."""
        if self.unstarted is not None:
            return self.unstarted
        try:
            code: int | None = self.proc.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # whatever it started goes too
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.reader.join(timeout=5)  # a process that left the group may hold the pipe: not waited for
        said = _said(self.result) if code == 0 else None
        if said is None:
            said = _how(code, timeout)
        return None if said == "" else _with_output(said, _excerpt(bytes(self.kept)))


def _our_package_first() -> dict[str, str]:
    """This environment with the folder this package was loaded from first on PYTHONPATH, where it
    is a checkout: the child runs this very copy of the check, which speaks the same arguments. An
    installed copy's folder (site-packages) is left where it is: put before the standard library,
    a backport installed there would stand in for the module it backports."""
    ours = Path(__file__).resolve().parents[1]
    if ours.name in ("site-packages", "dist-packages"):
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ours), os.environ.get("PYTHONPATH")]))}


def _drain(stream, kept: bytearray) -> None:
    """Read `stream` to its end, keeping its last `OUTPUT_BYTES` (the child never blocks on a full pipe)."""
    with stream:
        while chunk := stream.read1(65536):
            kept += chunk
            del kept[:-OUTPUT_BYTES]


def _said(result: Path) -> str | None:
    """What the child's result file says: "" (the ref loads), why not, or None (no verdict)."""
    try:
        found = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or "error" not in found:
        return None
    return str(found["error"] or "")


def _how(code: int | None, timeout: float) -> str:
    if code is None:
        return f"importing it (or calling it, for a scorer) took over {timeout:g} s, and the check was stopped"
    if code < 0:
        return f"the process importing it was killed by signal {-code}"
    return f"the process importing it ended with exit code {code} before saying whether it loads"


def _excerpt(output: bytes) -> str:
    """The end of what the child printed, on one line, redacted; "" for nothing."""
    from agentdescent.agents.redact import redact  # here, not at the top: the child never needs it

    text = " ".join(output.decode("utf-8", errors="replace").split())
    text = redact(text)
    return text if len(text) <= QUOTED_CHARS else "…" + text[-QUOTED_CHARS:]


def _with_output(reason: str, said: str) -> str:
    from agentdescent.agents.redact import redact  # here, not at the top: the child never needs it

    reason = redact(" ".join(reason.split()))
    reason = reason if len(reason) <= _REASON_CHARS else reason[:_REASON_CHARS] + "…"
    return f"{reason}; it printed: {said}" if said else reason


# the child


def main(argv: list[str]) -> NoReturn:
    """`refcheck PARENT_PID ORIGIN RESULT_FILE REF [CALL_FILE | --sent-by EXECUTOR]`: import the ref
    from ORIGIN (and call it on CALL_FILE's task and output, or pickle it as EXECUTOR would), write
    {"error": None or why not} to RESULT_FILE, and exit 0 at once; or, should PARENT_PID stop being
    this process's parent first, end as `_orphaned` says."""
    parent, origin, result, ref, *then = argv
    call, executor = ([], then[1]) if then[:1] == [SENT_BY] else (then, None)
    _orphaned(int(parent), Path(result).parent)
    if call:  # imported before ORIGIN is on the path: ours, not a planted copy (and only for a call: they are slow to import)
        from agentdescent.scoring import Judge  # noqa: F401
        from agentdescent.types import Task  # noqa: F401

    try:
        os.chdir(origin)
    except OSError as exc:
        error: str | None = f"cannot work in {origin}: {exc.strerror or exc}"
    else:
        sys.path.insert(0, origin)
        error = _load(ref)
    if error is None and call:
        error = _call(ref, call[0])
    if error is None and executor is not None:
        error = _unsendable(ref, executor)
    with open(result, "w", encoding="utf-8") as handle:
        json.dump({"error": error}, handle)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # not the user's atexit handlers or threads: the verdict is written, nothing else is owed


def _orphaned(parent: int, scratch: Path) -> None:
    """Watch, on a thread of its own, for `parent` to be gone (this process handed to another): then
    remove `scratch`, the folder the parent would have removed, and kill this process's group, the
    user's module and whatever it started. The user's module may import for ever; the check may not."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        if scratch.name.startswith(SCRATCH_PREFIX):  # only a folder the parent made for its checks
            shutil.rmtree(scratch, ignore_errors=True)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="agentdescent-refcheck-parent").start()


def _load(ref: str) -> str | None:
    module_name, _, attribute = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
        found = functools.reduce(getattr, attribute.split("."), module)
    except BaseException as exc:  # noqa: BLE001 - the user's module may raise anything, SystemExit too: all mean "does not load"
        return f"{type(exc).__name__}: {exc}"
    if not callable(found):
        return f"{attribute!r} is a value of type {type(found).__name__}, not a function or a class"
    return None


def _call(ref: str, call_file: str) -> str | None:
    """What calling the reward `ref` once as `ref(task, output)` shows wrong, or None."""
    from agentdescent.scoring import Judge  # here, not at the top: only a call needs them
    from agentdescent.types import Task

    module_name, _, attribute = ref.partition(":")
    found = functools.reduce(getattr, attribute.split("."), importlib.import_module(module_name))
    if isinstance(found, Judge):
        return None
    with open(call_file, encoding="utf-8") as handle:
        call = json.load(handle)
    try:
        value = found(Task(**call["task"]), call["output"])
    except BaseException as exc:  # noqa: BLE001 - whatever the user's reward raises is the verdict
        return f"calling it as {attribute}(task, output) raised {type(exc).__name__}: {exc}"
    return reward_problem(value, call["task"]["id"])


def _unsendable(ref: str, executor: str) -> str | None:
    """Why `executor` ("process": pickle; "ray": cloudpickle, which takes closures too) cannot send
    what `ref` names to its workers, or None. A class is sent by name; what it makes is not tried
    here (the run checks it as it starts)."""
    module_name, _, attribute = ref.partition(":")
    found = functools.reduce(getattr, attribute.split("."), importlib.import_module(module_name))
    try:
        pickle.dumps(found)
        return None
    except Exception as exc:  # noqa: BLE001 -- whatever its __reduce__ raises
        error: BaseException = exc
    if executor == "ray":
        try:
            from ray import cloudpickle

            cloudpickle.dumps(found)
            return None
        except ImportError:  # plan says Ray is missing, apart
            return None
        except Exception as exc:  # noqa: BLE001
            error = exc
    return f"{UNPICKLABLE}{type(error).__name__}: {error}"


def reward_problem(value: object, task_id: str) -> str | None:
    """Why `value` is no reward, in the words the run (`units.check_reward`) and plan both use;
    None for a number in [0, 1]; a coroutine or a generator is closed. reward_problem(2.0, "t1") names 2.0 and [0, 1]"""
    kind = unfinished(value)
    if kind is not None:
        return f"reward returned {kind} for task {task_id!r}, not its score: {ASYNC_GIVEN}"
    if isinstance(value, (str, bytes)) or not is_number(value):
        return f"reward returned {value!r} ({type(value).__name__}) for task {task_id!r}; it must return a number in [0, 1]"
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int past any float
        return (f"reward returned an int of {value.bit_length()} bits for task {task_id!r}; "  # type: ignore[union-attr]
                "it must be in [0, 1] (scale or clip it)")
    except Exception:  # noqa: BLE001 -- a number-like that is not one number: a numpy array of several, say
        return (f"reward returned {_shown(value)} ({type(value).__name__}) for task {task_id!r}; it must return one "
                "number in [0, 1] (for a one-element array, its item())")
    if math.isnan(number) or not 0.0 <= number <= 1.0:
        return f"reward returned {value} for task {task_id!r}; it must be in [0, 1] (scale or clip it)"
    return None


def _shown(value: object) -> str:
    try:
        return str(value)[:80]
    except Exception:  # noqa: BLE001 -- its __str__ raises too
        return "a value that cannot be shown"


def is_number(value: object) -> bool:
    """A real number as a reward may be one: is_number(True) and is_number(0.5), not is_number(None).
    The run's own check of a reward (`engine.calls.units.check_reward`) asks this too."""
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "__float__")


if __name__ == "__main__":
    main(sys.argv[1:])
