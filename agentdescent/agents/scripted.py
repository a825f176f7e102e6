"""A deterministic model for tests and examples: the same prompt always gets the same reply.

    scripted(lambda prompt: "...")              reply computed from the prompt
    scripted(lambda prompt, cwd: "...")         an agent: reply computed from the prompt and its working folder
    scripted({r"regex": "reply", ...})          the first pattern found in the prompt picks the reply
    scripted(["first", "second"])               replies in order; an error once they run out

It records usage like a real client (tokens estimated from the text), so budgets and results
behave as they would with a real model.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence

from agentdescent.agents.base import ModelUsage, estimated, metered_call
from agentdescent.errors import AgentError, UserError

Script = Callable[[str], str] | Callable[[str, str], str] | Mapping[str, str] | Sequence[str]


class ScriptedModel:
    """See the module docstring; build one with `scripted(...)`."""

    def __init__(self, script: Script, *, default: str | None = None, name: str = "scripted") -> None:
        self.name = name
        self.usage = ModelUsage()
        self._reply = _replier(script, default)
        self._wants_cwd = callable(script) and _takes_two(script)

    @property
    def works_in_a_folder(self) -> bool:
        """Whether the script reads its working folder (a stand-in for a CLI agent)."""
        return self._wants_cwd

    def __call__(self, prompt: str, *, cwd: str | os.PathLike[str] | None = None) -> str:
        """The scripted reply; a two-argument script also gets the working folder (like a CLI agent's
        `cwd`, the current directory when None)."""
        with metered_call(self.usage) as counts:
            reply = self._reply(prompt, os.fspath(cwd or os.getcwd())) if self._wants_cwd else self._reply(prompt)
            counts.update(estimated(prompt, reply))
        return reply


def scripted(script: Script, *, default: str | None = None, name: str = "scripted") -> ScriptedModel:
    """A deterministic stand-in for a model; see the module docstring."""
    return ScriptedModel(script, default=default, name=name)


def takes_a_folder(script: Callable[..., str]) -> bool:
    """Whether a script is called as (prompt, cwd): a stand-in for an agent working in a folder."""
    return _takes_two(script)


def _takes_two(script: Callable[..., str]) -> bool:
    try:
        parameters = inspect.signature(script).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: a plain prompt -> reply
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _replier(script: Script, default: str | None) -> Callable[..., str]:
    if callable(script):
        return script
    if isinstance(script, Mapping):
        rules = [(re.compile(pattern, re.DOTALL), reply) for pattern, reply in script.items()]

        def by_pattern(prompt: str) -> str:
            for pattern, reply in rules:
                if pattern.search(prompt):
                    return reply
            if default is None:
                raise AgentError(f"scripted model: no pattern matches the prompt {prompt[:80]!r}")
            return default

        return by_pattern
    if isinstance(script, Sequence) and not isinstance(script, str):
        replies, lock = list(script), threading.Lock()

        def in_order(prompt: str) -> str:
            with lock:
                if replies:
                    return replies.pop(0)
            if default is None:
                raise AgentError("scripted model: the scripted replies ran out")
            return default

        return in_order
    raise UserError("scripted() takes a function, a {pattern: reply} mapping, or a list of replies")
