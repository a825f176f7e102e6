"""A slow offline agent and reflector for runs that must still be going when a test acts on them
(cancel, resume, accept during a run): referred to in specs as `python:tests.slow_agent:answer`."""

from __future__ import annotations

import time

DELAY = 0.2


def answer(prompt: str, cwd: str | None = None) -> str:
    time.sleep(DELAY)
    return "no idea"


def reflect(prompt: str) -> str:
    time.sleep(DELAY)
    return "<rule>Answer with the year alone.</rule>"
