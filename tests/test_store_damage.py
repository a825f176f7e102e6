"""A run store someone else changed: files replaced by FIFOs, symlinks, huge or garbled ones, a
damaged checkpoint, a target named through a symlink, a temporary ledger still in use. Every
command ends at once with a line naming the damage, writes nothing outside, and loses nothing."""

from __future__ import annotations

import json
import os
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
from tests import keyword_domain as domain
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]


def finished_run(service, folder: Path) -> str:
    run = service.start(domain.spec(folder)).run_id
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
