"""The host as a worker: the coding agent that started the run does its rollouts, reflections and approvals.

When a spec names `host` as its agent or reflector (no model key needed), the run's process posts
each call to the run's mailbox and waits: `HostAgent` is a model (`prompt -> text`, or with `cwd`
an agent working in a workspace) whose answers come from whoever answers the mailbox, in practice
the host calling the MCP tools `rollout_next` / `rollout_submit` and `proposal_next` /
`proposal_submit`. Many calls wait at once, so a host may take several. `Approver` asks the same
way whether a gated (L1) change may land; `accept` and `reject` answer it.

Left out: the mailbox's files (`mailbox`), and the tools (the service and the MCP server).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from agentdescent.agents.base import ModelUsage, estimate_tokens, metered_call
from agentdescent.errors import AgentError
from agentdescent.runs.mailbox import Mailbox
from agentdescent.step.changes import GatedChange

ROLLOUT, PROPOSAL, APPROVAL = "rollout", "proposal", "approval"


class HostAgent:
    """One kind of host call (`rollout` or `proposal`), as a metered model."""

    def __init__(self, mailbox: Mailbox, kind: str, *, timeout: float, gone: Callable[[], bool]) -> None:
        self.name = f"host-{kind}"
        self.usage = ModelUsage()
        self._mailbox, self._kind, self._timeout, self._gone = mailbox, kind, timeout, gone

    def __call__(self, prompt: str, *, cwd: str | os.PathLike[str] | None = None) -> str:
        with metered_call(self.usage) as counts:
            body = {"prompt": prompt, "workspace": None if cwd is None else os.fspath(cwd)}
            answer = self._mailbox.ask(self._kind, body, timeout=self._timeout, gone=self._gone)
            text = answer.get("answer")
            if not isinstance(text, str):
                raise AgentError(f"the host's answer to a {self._kind} holds no text")
            counts.update(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(text))
        return text


class Approver:
    """`approve(change)` for evolve: the person decides, through `accept` / `reject`; no answer
    within `timeout` seconds declines the change."""

    def __init__(self, mailbox: Mailbox, *, timeout: float, gone: Callable[[], bool]) -> None:
        self._mailbox, self._timeout, self._gone = mailbox, timeout, gone

    def __call__(self, change: GatedChange) -> bool:
        try:
            answer = self._mailbox.ask(APPROVAL, change.model_dump(), timeout=self._timeout, gone=self._gone)
        except AgentError:
            return False
        return answer.get("approved") is True
