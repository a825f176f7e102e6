"""A store of many runs, as months of daily runs leave it: a listing surveys each target's backups
once, not once a run; a page of the MCP `runs` tool and a verb given no RUN read only the statuses
they show; a start reads none of the ended runs' (`runs/service.py`, `runs/ontarget.py`). Each
would otherwise grow with the store."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp
from agentdescent_mcp.server import server

from agentdescent.artifacts import backups, registry, targetlock
from agentdescent.cli.main import main
from agentdescent.runs.spec import read_spec
from agentdescent.runs.status import RunStatus
from agentdescent.runs.store import RunDir
from tests import keyword_domain as domain
from tests.mcp_support import call
from tests.runs_support import wait

ENDED = ["finished", "cancelled", "rejected", "failed"]


def stored(service, folder: Path, states: list[str]) -> list[str]:
    """Runs on `folder`'s prompt.md, one in each of `states`, made as a start makes them (no process)."""
    folder.mkdir(exist_ok=True)
    spec = read_spec(domain.spec(folder))
    return [service.store.create(spec, [], "Answer.\n", RunStatus(state=state, target=spec.target, message=state)).id
            for state in states]


def counted(monkeypatch, owner, name: str) -> list:
    """The first argument of each call of `owner.name` from now on (the call itself unchanged)."""
    calls, real = [], getattr(owner, name)

    def counting(first, *args, **kwargs):
        calls.append(first)
        return real(first, *args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return calls


def test_a_listing_surveys_each_target_s_backups_once_whatever_its_runs(service, tmp_path, monkeypatch):
    made = stored(service, tmp_path / "a", ENDED) + stored(service, tmp_path / "b", ENDED[:2])
    half = tmp_path / "a" / "prompt.md"
    with targetlock.locked(half):  # a write-back of a cut short, as a kill leaves it: every run on a says so
        backups.take(half, made_by="write_to", paths=[""], writes={"": registry.seen_bytes(b"x")})
    alone = {run: service.status(run) for run in made}

    surveyed = counted(monkeypatch, backups, "survey")
    listed = service.runs()
    assert sorted(map(str, surveyed)) == [str(half), str(tmp_path / "b" / "prompt.md")]
    assert [(r.id, r.state, r.message) for r in listed] == [(run, alone[run].state, alone[run].message) for run in made]
    assert sum("cut short" in r.message for r in listed) == len(ENDED)


def test_a_start_reads_the_status_of_no_run_whose_process_has_ended(service, tmp_path, monkeypatch):
    made = stored(service, tmp_path, ENDED * 2)
    read = counted(monkeypatch, RunDir, "recorded")
    run_id = service.start(domain.spec(tmp_path)).run_id
    assert not {run.id for run in read} & set(made)
    assert wait(service, run_id).state == "finished"


def test_a_page_of_runs_and_a_verb_given_no_run_read_only_the_statuses_they_show(service, tmp_path, monkeypatch):
    made = stored(service, tmp_path, ENDED * 3)
    read = counted(monkeypatch, RunDir, "status")

    async def body():
        async with mcp.Client(server, mode="legacy") as client:
            page = await call(client, "runs", newest=4, skip=3)
            assert [r["id"] for r in page["runs"]] == made[-7:-3] and page["older"] == len(made) - 7
    anyio.run(body)
    assert [run.id for run in read] == made[-7:-3]

    read.clear()
    assert main(["status"]) == 0  # the latest run's
    assert [run.id for run in read] == [made[-1]]
