"""The host as a worker: the coding agent that started the run does its rollouts, reflections and approvals.

When a spec names `host` as its agent or reflector (no model key needed), the run's process posts
each call to the run's mailbox and waits, for `host_timeout` or until the rollout or reflection the
call is part of is abandoned at `rollout_timeout` if that is sooner (the request is withdrawn then,
so the host is never asked for work nobody waits for): `HostAgent` is a model (`prompt -> text`, or
with `cwd` an agent working in a workspace) whose answers come from whoever answers the mailbox, in
practice the host calling the MCP tools `host_next` and `host_submit` (`hostwork`). Each request
names its candidate (a digest of the workspace's files, or of the text artifact given as
`context`), so that the host reads a candidate once however many tasks are done with it; and where
a rollout's prompt is the run's `template` around its task, only the task goes with it (the
template comes once a page). Many calls wait at
once, so a host takes several. `Approver` asks the same way whether a gated (L1) change may land;
`accept` and `reject` answer it. `changed()` is called as requests come and go: the runner puts
what the run waits on in its status there.

Left out: the mailbox's files (`mailbox`), and the tools (the service and the MCP server).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from agentdescent.agents.base import Cutoff, ModelUsage, cutoff, estimated, metered_call
from agentdescent.errors import AgentError
from agentdescent.runs.mailbox import Mailbox
from agentdescent.step.changes import Declined, GatedChange
from agentdescent.walking import entries

ROLLOUT, PROPOSAL, APPROVAL = "rollout", "proposal", "approval"
DIGEST_BYTES = 8_000_000  # a workspace larger than this is not compared with others: its requests go alone


class HostAgent:
    """One kind of host call (`rollout` or `proposal`), as a metered model."""

    def __init__(self, mailbox: Mailbox, kind: str, *, timeout: float, gone: Callable[[], bool],
                 changed: Callable[[], None] = lambda: None, template: str | None = None) -> None:
        """`template`: what every prompt of this kind is, with `{task}` where its task goes."""
        self.name = f"host-{kind}"
        self.usage = ModelUsage()
        self._mailbox, self._kind, self._timeout, self._gone, self._changed = mailbox, kind, timeout, gone, changed
        self._template = _Template.of(template)

    def __call__(self, prompt: str, *, cwd: str | os.PathLike[str] | None = None, context: str | None = None) -> str:
        """The host's answer to `prompt`, done in the workspace `cwd`, or with the text artifact
        `context` (given to the host once per candidate, not with every task)."""
        end = self._cut_off()  # before the bill: a request past its rollout's limit is never posted
        with metered_call(self.usage) as counts:
            workspace = None if cwd is None else os.fspath(cwd)
            template = self._template
            task = None if template is None else template.task_of(prompt)
            body = {"prompt": prompt if task is None else task, "workspace": workspace, "context": context,
                    "candidate": _candidate(workspace, context),
                    "template": None if task is None or template is None else template.text}
            try:
                timeout = self._timeout if end is None else max(0.0, end.at - time.monotonic())
                answer = self._mailbox.ask(self._kind, body, timeout=timeout, gone=self._gone, posted=self._changed,
                                           limit=f"host_timeout={self._timeout:g} s" if end is None else end.why)
            except AgentError as exc:
                if self._gone():
                    raise
                if end is not None:
                    raise AgentError(f"{self.name}: no answer within {end.why}; the request was withdrawn") from None
                raise AgentError(f"{exc} (host_timeout): nobody answered; the host's helpers take this work with "
                                 "host_next (the skill starts them), or raise host_timeout in the spec") from None
            finally:
                self._changed()
            text = answer.get("answer")
            if not isinstance(text, str):
                raise AgentError(f"the host's answer to a {self._kind} holds no text")
            counts.update(estimated(prompt, text))
        return text

    def _cut_off(self) -> Cutoff | None:
        """The end of the rollout or reflection the call is part of (`cutoff`) when it comes before
        `host_timeout` would: the request is withdrawn then, as its rollout is abandoned, so the
        host is never asked for work nobody waits for. Already past: `AgentError`, nothing posted."""
        now, end = time.monotonic(), cutoff()
        if end is None or end.at >= now + self._timeout:
            return None
        if end.at <= now:
            raise AgentError(f"{self.name}: the request was not posted: {end.why} had run out")
        return end


class Approver:
    """`approve(change)` for evolve: the person decides, through `accept` / `reject`, naming the
    change by its id (the request's); no answer within `timeout` seconds declines the change, and
    so does the run's cancel while it waits, each saying so (`Declined`; only the first lasts)."""

    def __init__(self, mailbox: Mailbox, *, timeout: float, gone: Callable[[], bool],
                 changed: Callable[[], None] = lambda: None) -> None:
        self._mailbox, self._timeout, self._gone, self._changed = mailbox, timeout, gone, changed

    def __call__(self, change: GatedChange) -> bool:
        try:
            answer = self._mailbox.ask(APPROVAL, change.model_dump(), timeout=self._timeout, gone=self._gone,
                                       posted=self._changed, request_id=change.id)
        except AgentError:
            if self._gone():
                raise Declined("the run was cancelled while it waited for the approval", lasting=False) from None
            raise Declined(f"no answer came within host_timeout={self._timeout:g} s") from None
        finally:
            self._changed()
        return answer.get("approved") is True


class _Template:
    """A prompt template split where its task goes: `task_of` finds the task in a prompt made from it."""

    def __init__(self, text: str, head: str, tail: str) -> None:
        self.text, self._head, self._tail = text, head, tail

    @classmethod
    def of(cls, template: str | None) -> _Template | None:
        """None when there is nothing to leave out: no template, or one that is its task alone."""
        if template is None:
            return None
        marker = "\0task\0"
        head, found, tail = template.replace("{task}", marker).partition(marker)
        if not found or marker in tail or not (head or tail):
            return None
        return cls(head + "{task}" + tail, head, tail)

    def task_of(self, prompt: str) -> str | None:
        if len(prompt) < len(self._head) + len(self._tail) or not prompt.startswith(self._head) \
                or not prompt.endswith(self._tail):
            return None
        return prompt[len(self._head): len(prompt) - len(self._tail)]


def _candidate(workspace: str | None, context: str | None) -> str | None:
    """A short id of what a request is done with: the text artifact, or the workspace's files
    (their paths and bytes, without the workspace's own folder name); None when it cannot be told."""
    digest = hashlib.sha256()
    if context is not None:
        digest.update(context.encode("utf-8", "surrogatepass"))
        return "c" + digest.hexdigest()[:10]
    if workspace is None:
        return None
    root, read = Path(workspace), 0
    try:
        for path in sorted(p for p in entries(root) if p.is_file() and not p.is_symlink()):
            data = path.read_bytes()
            read += len(data)
            if read > DIGEST_BYTES:
                return None
            digest.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape") + b"\0" + data + b"\0")
    except OSError:
        return None
    return "w" + digest.hexdigest()[:10]
