"""The child process of a refs check (`refcheck.check`): the one place the user's modules are
imported before a run, away from the process that asked.

`python -m agentdescent.refcheck_child PARENT_PID ORIGIN FOLDER` reads what to check from
FOLDER/asked.json (`{"refs": [...], "call": {"ref", "task", "output"} or null, "executor": "process",
"ray" or null, "fds": [...]}`, one pipe a ref and one for the call), imports the refs in turn from
ORIGIN, each printing to its own pipe, then calls the reward once, and appends to
FOLDER/verdicts.jsonl one line as it begins an item (`{"item": i, "printed": [j]}`: the earlier
item that imported its module, whose output is its too) and one as it knows the verdict
(`{"item": i, "error": null or why not}`), so that the parent keeps every verdict given before
the child hung or died. ORIGIN goes on the path only for a ref to a module it holds
(`userimport`), so that a `json.py` or `yaml.py` planted in a folder of no ref's stands in for nothing. What it leaves out:
judging how the child ended, and quoting what it printed (the parent does).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, NoReturn

from agentdescent import userimport
from agentdescent.refcheck import SCRATCH_PREFIX, UNPICKLABLE, reward_problem

PARENT_POLL_SECONDS = 0.2  # how often the child looks whether its parent is still there


def main(argv: list[str]) -> NoReturn:
    """Check what FOLDER/asked.json asks, as the module docstring says, and exit 0 at once; or,
    should PARENT_PID stop being this process's parent first, end as `_orphaned` says."""
    parent, origin, folder = argv
    _orphaned(int(parent), Path(folder))
    asked = json.loads(Path(folder, "asked.json").read_text(encoding="utf-8"))
    call, executor = asked["call"], asked["executor"]
    if call:  # imported before a ref may put ORIGIN on the path: ours, not a planted copy (and only for a call: slow to import)
        from agentdescent.scoring import Judge  # noqa: F401
        from agentdescent.types import Task  # noqa: F401

    items = [*asked["refs"], *([call["ref"]] if call else [])]
    imported: dict[str, int] = {}  # a module one of the items imported: that item
    with open(Path(folder, "verdicts.jsonl"), "a", encoding="utf-8") as verdicts:
        try:
            os.chdir(origin)
            moved: str | None = None
        except OSError as exc:
            moved = f"cannot work in {origin}: {exc.strerror or exc}"
        for i, (ref, fd) in enumerate(zip(items, asked["fds"], strict=True)):
            module = ref.partition(":")[0]
            _note(verdicts, item=i, printed=[imported[module]] if module in imported else [])
            _print_to(fd)
            fresh = module not in sys.modules
            error = moved or _load(ref, origin)
            if fresh and module in sys.modules:
                imported[module] = i
            if error is None and call and i == len(items) - 1:
                error = _call(ref, call)
            elif error is None and executor is not None:
                error = _unsendable(ref, executor)
            _note(verdicts, item=i, error=error)
    _flush()
    os._exit(0)  # not the user's atexit handlers or threads: the verdicts are written, nothing else is owed


def _note(verdicts: IO[str], **entry: object) -> None:
    """One line of the verdicts file, on disk at once: the parent reads it even if this process dies next."""
    verdicts.write(json.dumps(entry) + "\n")
    verdicts.flush()


def _print_to(fd: int) -> None:
    """What this process prints from now on (stdout and stderr, whatever the user's module starts
    too) goes to `fd`, the pipe of the item checked next; a module that closed it prints on where it did."""
    _flush()
    with contextlib.suppress(OSError):
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def _flush() -> None:
    """What Python holds of stdout and stderr written out, to the pipe of the item that printed it."""
    for stream in filter(None, (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)):  # None: no such stream
        with contextlib.suppress(Exception):  # a module may have left anything there, a closed file too
            stream.flush()


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


def _load(ref: str, origin: str) -> str | None:
    module_name, _, attribute = ref.partition(":")
    try:
        module = userimport.import_named(module_name, origin)
        found = functools.reduce(getattr, attribute.split("."), module)
    except BaseException as exc:  # noqa: BLE001 - the user's module may raise anything, SystemExit too: all mean "does not load"
        return f"{type(exc).__name__}: {exc}"
    if not callable(found):
        return f"{attribute!r} is a value of type {type(found).__name__}, not a function or a class"
    return None


def _call(ref: str, call: dict) -> str | None:
    """What calling the reward `ref` once as `ref(task, output)` shows wrong, or None."""
    from agentdescent.scoring import Judge  # here, not at the top: only a call needs them
    from agentdescent.types import Task

    module_name, _, attribute = ref.partition(":")
    found: Any = functools.reduce(getattr, attribute.split("."), importlib.import_module(module_name))
    if isinstance(found, Judge):
        return None
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


if __name__ == "__main__":
    main(sys.argv[1:])
