"""The host tools through the MCP server in process (one conversation: the server's one holder),
on a live run of the store whose requests the test posts: what host_release gives back, and what
a helper that just started (fresh) or a lease that ran out hands out again."""

from __future__ import annotations

import os
import time

import anyio
import mcp
import pytest
from agentdescent_mcp.server import server

from agentdescent import atomic
from agentdescent.runs import hostwork
from agentdescent.runs import mailbox as mailbox_module
from agentdescent.runs.mailbox import Claim, Request
from agentdescent.runs.spec import RunSpec
from agentdescent.runs.status import RunStatus
from agentdescent.runs.store import RunDir
from agentdescent.types import Task
from tests.mcp_support import call

OTHER = Claim(holder="other", pid=os.getpid())  # another conversation: its own MCP server


@pytest.fixture
def run(service):
    """A run of the store that asks the host for rollouts and reflections, live while the test
    goes (this process holds its lock), and cancelled before the store's fixture looks at it."""
    spec = RunSpec.model_validate({"target": "prompt.md", "tasks": [{"id": "t", "prompt": "p"}], "agent": "host"})
    made = service.store.create(spec, [Task(id="t", prompt="p")], "Answer.",
                                RunStatus(id="", state="running", target=spec.target))
    lock = made.lock()
    yield made
    made.write_status(made.recorded().model_copy(update={"state": "cancelled"}))
    os.close(lock)


def posted(run: RunDir, kind: str, *prompts: str, context: str = "RULES A") -> list[str]:
    """Requests of `kind` on one candidate, open in the run's mailbox as its askers post them; their ids."""
    folder = run.file("mailbox")
    folder.mkdir(exist_ok=True)
    ids = []
    for n, prompt in enumerate(prompts):
        request = Request(id=f"{kind[:4]}{len(list(folder.glob('*.request.json')))}{n}", kind=kind,
                          created=time.time(), body={"prompt": prompt, "context": context, "candidate": "c1"})
        atomic.write_text(folder / f"{request.id}.request.json", request.model_dump_json())
        ids.append(request.id)
    return ids


def handed(work: dict) -> list[str]:
    return sorted(request["request_id"] for group in work["work"] for request in group["requests"])


def in_conversation(body) -> None:
    async def main() -> None:
        async with mcp.Client(server, mode="legacy") as client:
            await body(client)

    anyio.run(main)


def test_a_helper_s_release_gives_back_its_own_kind_and_leaves_the_other_helper_s_work(run):
    rollouts, proposals = posted(run, "rollout", "task 1", "task 2"), posted(run, "proposal", "improve it")

    async def body(client):
        assert handed(await call(client, "host_next", run_id=run.id, kind="proposal", wait=0, fresh=True)) == proposals
        assert handed(await call(client, "host_next", run_id=run.id, kind="rollout", wait=0, fresh=True)) == rollouts
        released = await call(client, "host_release", run_id=run.id, kind="rollout")  # the rollout helper stops
        assert released["released"] == 2
        assert hostwork.take(run, OTHER, ("proposal",)).work == []  # still the reflection helper's
        again = await call(client, "host_next", run_id=run.id, kind="proposal", wait=0)
        assert again["work"] == [] and "holds 1 request(s)" in again["message"]  # not handed to it as new
        more = posted(run, "proposal", "and again")
        [group] = (await call(client, "host_next", run_id=run.id, kind="proposal", wait=0))["work"]
        assert [r["request_id"] for r in group["requests"]] == more and "context" not in group  # met: not sent again
        [group] = (await call(client, "host_next", run_id=run.id, kind="rollout", wait=0))["work"]
        assert sorted(r["request_id"] for r in group["requests"]) == rollouts and group["context"] == "RULES A"
        assert (await call(client, "host_release", run_id=run.id))["released"] == 4  # no kind: both
    in_conversation(body)


def test_a_helper_that_just_started_is_handed_what_a_lost_helper_of_its_kind_held(run):
    rollouts, proposals = posted(run, "rollout", "task 1", "task 2", "task 3"), posted(run, "proposal", "improve it")

    async def body(client):
        assert handed(await call(client, "host_next", run_id=run.id, kind="rollout", wait=0, fresh=True)) == rollouts
        assert handed(await call(client, "host_next", run_id=run.id, kind="proposal", wait=0, fresh=True)) == proposals
        # the rollout helper went silent; the one started in its place is handed its work at once, whole
        work = await call(client, "host_next", run_id=run.id, kind="rollout", wait=0, fresh=True)
        assert handed(work) == rollouts and work["work"][0]["context"] == "RULES A" and "holds" not in work["message"]
        assert hostwork.take(run, OTHER, ("proposal",)).work == []  # the reflection helper's kept
    in_conversation(body)


def test_asking_for_more_keeps_no_lost_request_held_past_its_lease(run, monkeypatch):
    """Each host_next renewed every claim of its kind: a helper asking again while it held what it
    lost kept it from everyone, itself included, until the run gave up on it."""
    clock = [time.time()]
    monkeypatch.setattr(mailbox_module.time, "time", lambda: clock[0])
    rollouts = posted(run, "rollout", "task 1", "task 2")

    async def body(client):
        assert handed(await call(client, "host_next", run_id=run.id, kind="rollout", wait=0)) == rollouts
        clock[0] += hostwork.LEASE_SECONDS - 10
        asked = await call(client, "host_next", run_id=run.id, kind="rollout", wait=0)
        assert asked["work"] == [] and "holds 2 request(s)" in asked["message"]
        clock[0] += 20  # a minute since it took them, and no answer nor read of them
        assert handed(await call(client, "host_next", run_id=run.id, kind="rollout", wait=0)) == rollouts  # back
        clock[0] += hostwork.LEASE_SECONDS + 1
        assert sorted(r.request_id for g in hostwork.take(run, OTHER, ("rollout",)).work for r in g.requests) == rollouts
    in_conversation(body)
