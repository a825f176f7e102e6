"""A run's status read against its target: a write-back cut short, and a restore that put the
files back but never told the runs (`runs/ontarget.py`)."""

from __future__ import annotations

from agentdescent.artifacts import backups, registry, targetlock, undo
from agentdescent.result import EvolveResult
from tests import keyword_domain as domain
from tests.runs_support import wait

LEAD = "Answer with the code.\n"


def finished(service, tmp_path) -> tuple[str, str]:
    """A finished run on tmp_path/prompt.md; its id and the version it would write back."""
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    assert wait(service, run_id).state == "finished"
    run = service.store.get(run_id)
    return run_id, EvolveResult.from_json(run.file("result.json").read_text(encoding="utf-8")).rendered


def test_an_accept_cut_short_mid_write_is_told_by_status_and_reject_and_finished_by_the_next_accept(service, tmp_path):
    """An accept SIGKILLed mid write-back left the target part old, part the run's; status said
    nothing of it, and reject said the target "was not touched" and recorded "nothing was written"."""
    target = tmp_path / "prompt.md"
    run_id, evolved = finished(service, tmp_path)
    with targetlock.locked(target):  # the killed accept's backup, its write still `applying`
        backups.take(target, made_by="write_to", paths=[""], writes={"": registry.seen_bytes(evolved.encode())})
    target.write_text(evolved, encoding="utf-8")  # the part it wrote before the kill

    told = service.status(run_id)
    assert told.state == "finished" and "cut short and left it half done" in told.message
    assert f"agentdescent accept {run_id} finishes it" in told.next and f"agentdescent restore {target}" in told.next

    rejected = service.reject(run_id)
    assert "not touched" not in rejected.message and "cut short and left it half done" in rejected.message
    assert f"agentdescent accept {run_id}" in rejected.next and f"agentdescent restore {target} rolls it back" in \
        rejected.next
    told = service.status(run_id)
    assert told.state == "rejected" and "nothing was written" not in told.message
    assert "cut short" in told.message and f"agentdescent accept {run_id}" in told.next

    accepted = service.accept(run_id)
    assert accepted.message.startswith("first rolled back the write a killed process left half done")
    assert backups.interrupted(target) is None and target.read_text(encoding="utf-8") == evolved
    assert service.status(run_id).state == "accepted" and "cut short" not in service.status(run_id).message


def test_a_restore_that_never_told_the_runs_leaves_no_status_that_undoes_it(service, tmp_path):
    """A restore SIGKILLed after it put the backup back (or while it removed old backups) left the
    run `accepted`, whose next step, `restore`, put the run's version back over what the user asked for."""
    target = tmp_path / "prompt.md"
    run_id, evolved = finished(service, tmp_path)
    service.accept(run_id)
    undo.restore(target)  # the restore's own work, without the runs it tells after it
    assert target.read_text(encoding="utf-8") == LEAD

    told = service.status(run_id)
    assert told.state == "restored" and "no longer holds this run's version" in told.message
    assert told.next == f"agentdescent accept {run_id} writes the run's version again" and told.backup is None
    assert service.store.get(run_id).recorded().state == "accepted"  # read from the disk, never written by status

    back = service.restore(target)  # the run's version back: the stale status caught up first, then followed
    assert back.runs == {run_id: "accepted"} and f"run {run_id} is now accepted" in back.message
    assert target.read_text(encoding="utf-8") == evolved
    assert service.store.get(run_id).recorded().state == "accepted"

    service.restore(target)
    undo.restore(target)  # the run's version back, again untold
    assert target.read_text(encoding="utf-8") == evolved
    told = service.status(run_id)
    assert told.state == "accepted" and told.next == f"agentdescent restore {target} puts the previous content back"
    assert service.store.get(run_id).recorded().state == "restored"
