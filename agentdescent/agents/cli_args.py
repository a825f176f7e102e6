"""What a CLI agent is given, checked before it starts: its options, its working directory, and
its prompt, which travels as a command-line argument or, past `ARGUMENT_BYTES`, on stdin.

Linux caps one argument at 128 KiB (MAX_ARG_STRLEN): a reflection's prompt holds the whole folder,
and a skill folder of 150 KB made every reflection fail to start ("Argument list too long"). Both
CLIs read the prompt on stdin when none is given (`claude -p`, `codex exec -`).

Left out: running the agent (`cli_agents`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentdescent.errors import UserError

ARGUMENT_BYTES = 100_000  # a longer prompt goes on stdin: well within Linux's 128 KiB an argument


def given(prompt: str) -> tuple[str | None, str | None]:
    """(the prompt as a command-line argument, or None; what the CLI reads on stdin, or None). As an
    argument it gets one leading space when it starts with '-', so that the CLI takes no option of it."""
    if len(prompt.encode("utf-8")) > ARGUMENT_BYTES:
        return None, prompt
    return (" " + prompt if prompt.startswith("-") else prompt), None



def check_prompt(prompt: Any) -> None:
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError(f"a CLI agent needs a non-empty prompt string, got {type(prompt).__name__} {prompt!r:.40}")
    if "\0" in prompt:
        raise UserError("the prompt contains a NUL character, which cannot be passed on a command line")


def workdir(cwd: str | os.PathLike[str] | None) -> str:
    if cwd is None:
        return os.getcwd()
    path = os.fspath(cwd)
    if not os.path.isdir(path):
        raise UserError(f"the working directory {path!r} does not exist or is not a directory; create it "
                        "or pass cwd= an existing directory")
    return path


def positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def nonempty(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{what} must be a non-empty string, got {value!r}")
    return value


def strings(values: Any, what: str) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) \
            or not all(isinstance(value, str) for value in values):
        raise UserError(f"{what} must be a list of strings such as ['--max-turns', '5'], got {values!r}")
    return tuple(values)


def env_overrides(env: Any) -> Mapping[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise UserError("env must map variable names to string values")  # values unquoted: they may be secret
    return env
