"""Process checks shared by the tests that kill programs."""

from __future__ import annotations

import os
import subprocess
import time


def gone(pid, polls=200):
    """True once `pid` no longer runs (absent, or a zombie nobody reaped); polls up to ~2 s,
    since a killed process may take a moment to die."""
    for _ in range(polls):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as file:
                state = file.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            state = "R"
        if state in ("Z", "X"):
            return True
        time.sleep(0.01)
    return False


def close_and_wait(process: subprocess.Popen, timeout: float) -> None:
    """End a child that reads its stdin as a program ends: close its input, wait `timeout`
    seconds for it to exit, and kill it if it does not."""
    process.stdin.close()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
