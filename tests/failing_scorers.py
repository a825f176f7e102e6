"""Scorers that break, for the tests of a run that cannot learn (python:tests.failing_scorers:NAME):
`swapped` takes its arguments in the wrong order, so it raises on every call; `picky` scores the
gold answer and raises on anything else, so it passes plan's one try and fails every rollout;
`loud` prints 2 MB a call; `chatty` prints the key every way a program can; `refusing` raises,
mid-run, a UserError naming the key and a file name that is not UTF-8; `spinning` spins past any
timeout once plan's one try is done; `nan`, `inf`, `minus_one`, `two` and `huge` return a number
outside [0, 1]; `nan_later` returns NaN from its third call in a run's process; `busy_at_first`
raises on the first two scorings of the task $BUSY_TASK in a run's process (a grading service busy
while the run measures where it starts: a held-out task is scored twice there), then scores."""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import threading

from agentdescent.errors import UserError


def swapped(output, task):  # noqa: ANN001 - the mistake under test: (output, task) for (task, output)
    return float(output == task.gold)


def picky(task, output: str) -> float:
    if output != task.gold:
        raise ValueError(f"cannot score {output!r}")
    return 1.0


def word(task, output: str) -> str:
    return "yes"


def loud(task, output: str) -> float:
    print("x" * (2 << 20))
    return float(output == task.gold)


_said: list[bool] = []
_one_at_a_time = threading.Lock()  # what one call prints is not interleaved with another's


def chatty(task, output: str) -> float:
    """In a run's process: on its first call, OPENAI_API_KEY printed, written to stderr, logged, in
    two writes of one line, by a child, and by a child that outlives the run, beside terminal
    escapes; on every call, text without a newline."""
    with _one_at_a_time:
        return _chatty(task, output)


def _chatty(task, output: str) -> float:
    key = os.environ.get("OPENAI_API_KEY", "")
    if "AGENTDESCENT_RUN" in os.environ and not _said:
        _said.append(True)
        print("printed:", key)
        print("stderr: Bearer " + key, file=sys.stderr)
        logging.getLogger("somelib").warning("retrying with api_key=%s", key)
        sys.stdout.flush()
        os.write(1, f"in two writes: {key[:9]}".encode())
        os.write(1, f"{key[9:]} end\n".encode())
        subprocess.run(["sh", "-c", 'echo "child: $OPENAI_API_KEY"'], check=True)
        # no mark of the run in its environment: nothing stops it, and it holds the log's pipe past the run
        subprocess.Popen(["env", "-i", f"LATE={key}", "sh", "-c", 'sleep 3; echo "late: $LATE"'])
        print("\x1b]0;pwned-title\x07\x1b[2J escapes")
    sys.stdout.write("scored;")
    return float(output == task.gold)


_scored = itertools.count()


def refusing(task, output: str) -> float:
    if "AGENTDESCENT_RUN" in os.environ and next(_scored) == 40:  # in the run's process, past the start's measurement
        name = b"data-\xff.txt".decode("utf-8", "surrogateescape")  # what os.fsdecode makes of a name that is not UTF-8
        raise UserError(f"the grading service refused the key {os.environ.get('OPENAI_API_KEY')} for {name}")
    return float(output == task.gold)


def spinning(task, output: str) -> float:
    while "AGENTDESCENT_RUN" in os.environ:  # in the run's process, not in plan's
        pass
    return 1.0


def nan(task, output: str) -> float:
    return float("nan")


def inf(task, output: str) -> float:
    return float("-inf")


def minus_one(task, output: str) -> int:
    return -1


def two(task, output: str) -> float:
    return 2.0


def huge(task, output: str) -> int:
    return 10**400


_nan_calls = itertools.count()


def nan_later(task, output: str) -> float:
    if "AGENTDESCENT_RUN" in os.environ and next(_nan_calls) >= 2:  # in the run's process, within the start's measurement
        return float("nan")
    return float(output == task.gold)


_busy: dict[str, int] = {}
_busy_lock = threading.Lock()


def busy_at_first(task, output: str) -> float:
    if "AGENTDESCENT_RUN" in os.environ and task.id == os.environ.get("BUSY_TASK"):
        with _busy_lock:
            _busy[task.id] = _busy.get(task.id, 0) + 1
            busy = _busy[task.id] <= 2
        if busy:
            raise RuntimeError("the grading service is busy")
    return float(output == task.gold)
