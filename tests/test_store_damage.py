"""A run store someone else changed: files replaced by FIFOs, symlinks, huge or garbled ones, a
damaged checkpoint, a target named through a symlink, a temporary ledger still in use. Every
command ends at once with a line naming the damage, writes nothing outside, and loses nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from rich.console import Console

from agentdescent import Task, UserError, evolve
from agentdescent.cli.prune import prune
from agentdescent.engine.persist.checkpoint import RunFiles
from agentdescent.ledger import Ledger
from agentdescent.runs.status import LIVE
from agentdescent.runs.store import RunStore
from tests import keyword_domain as domain
from tests.procutil import gone
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]


def finished_run(service, folder: Path, **fields) -> str:
    run = service.start(domain.spec(folder, **fields)).run_id
    wait(service, run)
    return run


@pytest.mark.parametrize("damage", ["fifo", "huge", "garbled", "symlink"])
def test_a_damaged_status_is_named_at_once_and_the_run_is_still_listed(service, tmp_path, damage):
    run = finished_run(service, tmp_path)
    status = service.store.get(run).file("status.json")
    status.unlink()
    if damage == "fifo":
        os.mkfifo(status)
    elif damage == "huge":
        with open(status, "wb") as file:
            file.truncate(1 << 30)  # sparse: a gigabyte to read, had it been read
    elif damage == "garbled":
        status.write_bytes(b"\xff\xfe{not json")
    else:
        status.symlink_to("/etc/hostname")
    started = time.monotonic()
    with pytest.raises(UserError, match=rf"^run {run} is damaged: its status.json is .*move that folder out of the store"):
        service.status(run)
    [listed] = service.runs()
    assert listed.state == "damaged" and listed.message.startswith(f"run {run} is damaged")
    hook = subprocess.run([sys.executable, "-m", "agentdescent_mcp.hook", "session-start"], capture_output=True,
                          text=True, timeout=30, cwd=ROOT / "mcp_server", env={**os.environ})
    assert hook.returncode == 0 and hook.stdout == ""
    assert time.monotonic() - started < 20


def test_a_status_that_is_not_the_runs_own_is_damage_and_accept_writes_no_other_target(service, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = (service.store.get(finished_run(service, tmp_path / name)) for name in ("a", "b"))
    held = (tmp_path / "a" / "prompt.md").read_bytes()
    theirs = json.loads(a.file("status.json").read_text(encoding="utf-8"))
    own = json.loads(b.file("status.json").read_text(encoding="utf-8"))
    copied, retargeted = theirs, {**own, "target": theirs["target"]}
    for status, said in ((copied, f"the status of another run \\('{a.id}'\\)"), (retargeted, "a status for «.*/a/prompt.md»")):
        b.file("status.json").write_text(json.dumps(status), encoding="utf-8")
        damage = rf"^run {b.id} is damaged: its status.json is {said}"
        with pytest.raises(UserError, match=damage):
            service.status(b.id)
        with pytest.raises(UserError, match=damage):
            service.accept(b.id)
        assert [run.state for run in service.runs()] == ["finished", "damaged"]
    # the spec and the status edited alike to name the other target: the seal refuses the accept
    b.file("status.json").write_text(json.dumps(retargeted), encoding="utf-8")
    spec = json.loads(b.file("spec.json").read_text(encoding="utf-8"))
    b.file("spec.json").write_text(json.dumps({**spec, "target": theirs["target"]}), encoding="utf-8")
    with pytest.raises(UserError, match=rf"^run {b.id} is damaged: its spec.json is not as the run was made"):
        service.accept(b.id)
    assert (tmp_path / "a" / "prompt.md").read_bytes() == held
    assert not list(tmp_path.glob("a/.prompt.md.bak-*"))


@pytest.mark.parametrize("how", ["deleted", "moved"])
def test_a_run_folder_deleted_or_moved_while_it_runs_is_not_made_again_and_its_process_stops(service, tmp_path,
                                                                                           monkeypatch, how):
    """The run's process wrote its status through a write that made the folder: a deleted run came
    back as a run of a status alone, listed as failed, and a moved one left that ghost behind."""
    left = tmp_path / "left"
    left.mkdir()
    monkeypatch.setenv("KEYWORD_LEAVE", str(left))  # each agent call starts a program that outlives it
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")
    (tmp_path / "target").mkdir()
    run_id = service.start(domain.spec(tmp_path / "target", rounds=40, target_reward=None)).run_id
    status = wait(service, run_id, until=lambda s: s.state == "running" or s.state not in LIVE)
    while not any(left.iterdir()):
        time.sleep(0.05)
    run = service.store.get(run_id)
    elsewhere = tmp_path / "elsewhere" / "runs"
    elsewhere.mkdir(parents=True)
    run.path.rename(elsewhere / run_id)  # whole at once, as a move is; a deletion is that, then the removal
    if how == "deleted":
        shutil.rmtree(elsewhere / run_id)
    deadline = time.monotonic() + 60
    while not gone(status.pid) and time.monotonic() < deadline:
        pass  # gone() polls for ~2 s
    assert gone(status.pid) and not os.path.lexists(run.path) and service.runs() == []
    assert all(gone(int(p.name)) for p in left.iterdir())  # the programs its agents started stopped with it
    if how == "moved":  # the run is where it was moved to, and goes on from there
        moved = RunStore(elsewhere).get(run_id).status()
        assert moved.state == "interrupted" and f"agentdescent resume {run_id}" in moved.next


def test_files_a_run_appends_to_are_never_written_through_a_symlink(service, tmp_path):
    run = service.store.get(finished_run(service, tmp_path))
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n", encoding="utf-8")
    run.file("events.jsonl").unlink()
    run.file("events.jsonl").symlink_to(outside)
    with pytest.raises(UserError, match="its events.jsonl is a symlink"):
        run.appending("events.jsonl")
    run.file("lock").unlink()
    run.file("lock").symlink_to(tmp_path / "made-by-the-lock")
    with pytest.raises(UserError, match="its lock is a symlink"):
        run.lock()
    assert outside.read_text(encoding="utf-8") == "mine\n" and not (tmp_path / "made-by-the-lock").exists()
    run.file("lock").unlink()  # the store as it was, for the fixture's look at its runs


def test_a_damaged_checkpoint_stops_a_resume_and_keeps_the_bill(tmp_path):
    tasks = [Task(id=f"t{i}", prompt=str(i)) for i in range(12)]
    reward = lambda task, output: float("year" in output)  # noqa: E731
    options = {"run": lambda rendered, task: rendered, "rounds": 2, "store": tmp_path / "ledger"}
    evolve(tasks, reward, propose=lambda *a: None, **options)
    files = RunFiles(tmp_path / "ledger")
    checkpoint = json.loads(files.checkpoint_path.read_text(encoding="utf-8"))
    files.checkpoint_path.write_text(json.dumps({**checkpoint, "finished": False})[:100], encoding="utf-8")
    journals = {path: path.read_bytes() for path in files.folder.iterdir() if path.suffix == ".jsonl"}
    with pytest.raises(UserError, match="checkpoint .* cannot be read .*; nothing was reset"):
        evolve(tasks, reward, propose=lambda *a: None, **options)
    assert journals and all(path.read_bytes() == kept for path, kept in journals.items())


def test_prune_leaves_a_temporary_ledger_a_run_has_open_however_old(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live, idle = (Path(tempfile.mkdtemp(prefix="agentdescent-ledger-")) for _ in range(2))
    with Ledger(live):
        Ledger(idle).close()
        long_ago = time.time() - 3600
        for folder in (live, idle):
            for path in [folder, *folder.rglob("*")]:
                os.utime(path, (long_ago, long_ago), follow_symlinks=False)
        assert prune(Console(file=open(os.devnull, "w"))) == 0  # noqa: SIM115
        assert live.is_dir() and not idle.exists()


def test_a_target_named_through_a_symlink_is_the_same_target(service, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    first = service.start(domain.spec(tmp_path / "real", rounds=40, target_reward=None)).run_id
    try:
        with pytest.raises(UserError, match=f"run {first} is already evolving"):
            service.start(domain.spec(tmp_path / "link"))
    finally:
        service.cancel(first)


def test_a_store_behind_a_file_is_an_error_not_an_empty_list(tmp_path):
    from agentdescent.runs.store import RunStore

    (tmp_path / "home").write_text("", encoding="utf-8")
    with pytest.raises(UserError, match=r"home is a file, not a folder; set AGENTDESCENT_HOME to a folder"):
        RunStore(tmp_path / "home" / "runs").all()


def test_a_prefix_matching_many_runs_says_how_many_it_did_not_list(service):
    for i in range(7):
        (service.store.root / f"prompt-{i:06x}").mkdir(parents=True)
        (service.store.root / f"prompt-{i:06x}" / "status.json").write_text("{}", encoding="utf-8")
    with pytest.raises(UserError, match=r"'prompt' matches 7 runs \(prompt-000000, .*, prompt-000004 and 2 more\)"):
        service.store.get("prompt")


def stopped_run(service, folder: Path):
    """A run that committed rounds, then marked cancelled: one `resume` takes up."""
    run = service.store.get(finished_run(service, folder, rounds=3, target_reward=None))
    run.write_status(run.status().model_copy(update={"state": "cancelled"}))
    return run


def dev_log(ledger: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(ledger), "log", "--format=%s", "dev"], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def rounds(log: list[str]) -> list[str]:
    """The rounds of a ledger's commits, newest first: "round 3: 1 diff on 1 key, ..." is round 3."""
    return [subject.split(":")[0] for subject in log if subject.startswith("round ")]


@pytest.mark.parametrize("lost", ["checkpoint", "folder", "ledger"])
def test_a_run_that_lost_its_checkpoint_is_refused_a_resume_not_started_over(service, tmp_path, lost):
    """Resumed, it started over: its rounds were committed again and its bill began again at 0, past
    max_calls, while it said it resumed from its last checkpoint."""
    run = stopped_run(service, tmp_path)
    files = RunFiles(run.ledger)
    if lost == "checkpoint":
        files.checkpoint_path.unlink()
    else:
        shutil.rmtree(files.folder if lost == "folder" else run.ledger)
    told = service.status(run.id)
    assert "had begun" in told.error and "agentdescent resume" not in told.next
    assert f"start a new run from its spec, agentdescent evolve {run.file('spec.json')}" in told.next
    missing = "its ledger" if lost == "ledger" else "its checkpoint"
    with pytest.raises(UserError, match=rf"^run {run.id} had begun \(its status counts 3 rounds done and \d+ calls\) "
                                        rf"but {missing} .* is missing: resumed, it would start over"):
        service.resume(run.id)


def test_the_run_s_own_process_reads_dev_for_a_round_s_commit_when_nothing_else_shows_it_had_begun(service, tmp_path):
    run = stopped_run(service, tmp_path)
    made = dev_log(run.ledger)
    shutil.rmtree(RunFiles(run.ledger).folder)
    run.write_status(run.status().model_copy(update={"round": 0, "calls": 0}))
    service.resume(run.id)
    ended = wait(service, run.id)
    assert ended.state == "failed" and f"dev holds the commits of {len(rounds(made))} rounds" in ended.error
    assert "agentdescent resume" not in ended.next and dev_log(run.ledger) == made  # nothing committed again


def test_a_run_stopped_before_its_first_checkpoint_starts_as_a_new_one(service, tmp_path):
    run = stopped_run(service, tmp_path)
    shutil.rmtree(run.ledger)  # what such a run has: no ledger or a seeded one, and nothing spent
    run.write_status(run.status().model_copy(update={"round": 0, "calls": 0}))
    service.resume(run.id)
    assert wait(service, run.id).state == "finished"
    made = dev_log(run.ledger)
    assert made[-2:] == ["seed artifact", "ledger created"] and len(set(rounds(made))) == len(rounds(made))


def test_a_ledger_whose_run_had_begun_and_lost_its_checkpoint_is_not_started_over(tmp_path):
    tasks = [Task(id=f"t{i}", prompt=str(i)) for i in range(12)]
    reward = lambda task, output: float("year" in output)  # noqa: E731
    options = {"run": lambda rendered, task: rendered, "rounds": 2, "store": tmp_path / "ledger"}
    first = evolve(tasks, reward, propose=lambda *a: None, **options)
    files = RunFiles(tmp_path / "ledger")
    files.checkpoint_path.unlink()
    with pytest.raises(UserError, match=rf"had begun \(its start log counts {first.usage.calls} calls\) but its "
                                        r"checkpoint .* is missing; nothing was reset"):
        evolve(tasks, reward, propose=lambda *a: None, **options)
    assert files.starts.count() == first.usage.calls
    shutil.rmtree(files.folder)  # what the refusal says to do to start anew
    assert evolve(tasks, reward, propose=lambda *a: None, **options).usage.calls < first.usage.calls + 1


@pytest.mark.parametrize("damage", ["ref", "object"])
def test_a_run_whose_ledger_something_else_damaged_names_the_damage_and_advises_no_resume(service, tmp_path, damage):
    """It failed in the words of evolve(store=...) ("choose an empty or new directory for store="),
    and its next step was the same resume, which failed again."""
    run = stopped_run(service, tmp_path)
    head = git_out(run.ledger, "rev-parse", "dev")
    if damage == "ref":
        (run.ledger / "refs" / "heads" / "dev").write_text("oops\n", encoding="utf-8")
        named = "its ref refs/heads/dev names no commit"
    else:
        (run.ledger / "objects" / head[:2] / head[2:]).unlink()
        named = f"its object {head} is missing"
    service.resume(run.id)
    ended = wait(service, run.id)
    assert ended.state == "failed" and ended.error.startswith(f"run {run.id}'s ledger is damaged: {named}")
    assert "store=" not in ended.error and "agentdescent resume" not in ended.next
    assert ended.next == (f"it cannot be resumed: start a new run from its spec, agentdescent evolve "
                          f"{run.file('spec.json')}; agentdescent show {run.id} still shows what it did")


def test_a_ref_git_s_reflog_kept_is_named_and_once_put_back_the_run_resumes(service, tmp_path):
    run = stopped_run(service, tmp_path)
    head = git_out(run.ledger, "rev-parse", "dev")
    for sha in (f"{head}~1", head):  # a reflog, as git keeps one where core.logAllRefUpdates says so
        git_out(run.ledger, "-c", "core.logAllRefUpdates=always", "update-ref", "refs/heads/dev", sha)
    (run.ledger / "refs" / "heads" / "dev").write_text("oops\n", encoding="utf-8")
    service.resume(run.id)
    ended = wait(service, run.id)
    assert f"git's reflog says refs/heads/dev was last at {head}: put it back (" in ended.next
    put_back = re.search(r"put it back \((.*?)\), then: agentdescent resume ", ended.next).group(1)
    subprocess.run(put_back, shell=True, check=True, capture_output=True, timeout=60)  # as told
    service.resume(run.id)
    assert wait(service, run.id).state == "finished"


def git_out(ledger: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(ledger), *args], capture_output=True, text=True, check=True).stdout.strip()
