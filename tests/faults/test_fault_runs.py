"""Faults of detached runs: the run's process SIGKILLed at chosen points and resumed, a write-back
killed half-way, a cancel that must take the agents' processes with it, a store on a read-only
or a full disk, and a provider key that must never reach the store."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentdescent.errors import UserError
from agentdescent.ledger import Ledger
from agentdescent.runs import Service
from tests import keyword_domain as domain
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-0123456789abcdef"


def step_commits(ledger: Path) -> list[tuple[str, str]]:
    with Ledger(ledger) as opened:
        return [(r.message, r.trailers["Diffs"]) for r in reversed(opened.log()) if r.trailers.get("Round", "").isdigit()]


def rules_committed(ledger: Path) -> list[set[int]]:
    """The rules each step's commit added, read off the artifact before and after it."""
    with Ledger(ledger) as opened:
        steps = [r for r in reversed(opened.log()) if r.trailers.get("Round", "").isdigit()]
        return [domain.known(opened.snapshot("artifact", r.version)["prompt"])
                - domain.known(opened.snapshot("artifact", r.version - 1)["prompt"]) for r in steps]


@pytest.mark.parametrize("kill_at", [3, 12, 30, 45, 70])  # the held-out start, worker turns, a step, validation
def test_a_run_killed_at_any_point_resumes_with_the_commits_it_would_have_had(service, tmp_path, monkeypatch, kill_at):
    monkeypatch.setenv("KEYWORD_KILL_AT", str(kill_at))
    run = service.start(domain.spec(tmp_path)).run_id
    killed = wait(service, run)
    assert killed.state == "interrupted" and "resume" in killed.next
    folder = service.store.get(run)
    before = step_commits(folder.ledger) if (folder.ledger / "HEAD").exists() else []

    monkeypatch.delenv("KEYWORD_KILL_AT")
    assert service.resume(run).run_id == run
    done = wait(service, run)
    assert done.state == "finished" and done.best_reward == 1.0
    after = step_commits(folder.ledger)
    assert after[: len(before)] == before  # nothing committed was lost
    assert rules_committed(folder.ledger) == [{i} for i in range(domain.RULES)]  # one rule a commit, none twice
    fsck = subprocess.run(["git", "-C", str(folder.ledger), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    shown = service.show(run)
    assert len(shown.committed) == domain.RULES


def test_a_write_back_killed_half_way_is_finished_by_the_next_accept(service, tmp_path):
    skill = tmp_path / "my-skill"
    shutil.copytree(ROOT / "examples" / "skills" / "support-router", skill)
    spec = ROOT / "examples" / "specs" / "support-router.yaml"
    text = spec.read_text(encoding="utf-8").replace("../../my-skill", str(skill))
    (tmp_path / "spec.yaml").write_text(text.replace("support-router-tasks.jsonl",
                                                     str(spec.parent / "support-router-tasks.jsonl")), encoding="utf-8")
    run = service.start(tmp_path / "spec.yaml").run_id
    assert wait(service, run).state == "finished"
    child = subprocess.run([sys.executable, str(Path(__file__).with_name("accept_child.py")), run],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert child.returncode == -9, child.stderr  # killed after its second file
    assert service.status(run).state == "finished"  # not accepted: the write did not complete
    accepted = service.accept(run)
    result = service.show(run)
    for path in accepted.written or result.files_changed:
        assert (skill / path).exists()
    assert "+- invoice" in result.diff or "+- payment" in result.diff
    assert service.status(run).state == "accepted" and accepted.backup


def test_cancel_stops_the_run_and_every_process_it_started(service, tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("KEYWORD_PIDS", str(pids))
    run = service.start({**domain.spec(tmp_path), "agent": "python:tests.keyword_domain:sleeper"}).run_id
    deadline = time.monotonic() + 30
    while not list(pids.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = [int(p.name) for p in pids.iterdir()]  # named by its pid: its text may not be written yet
    assert started, "the agent never started its process"
    cancelled = service.cancel(run)
    assert cancelled.state == "cancelled"
    deadline = time.monotonic() + 10  # killed at once; a loaded machine may take a moment to let them go
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in started if _alive(pid)] == []
    assert not service.store.get(run).alive()


def test_no_provider_key_reaches_the_store_the_ledger_or_an_answer(service, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    run = service.start({**domain.spec(tmp_path), "agent": "python:tests.keyword_domain:leaky", "rounds": 2}).run_id
    wait(service, run)
    answers = [service.status(run).model_dump_json(), service.show(run).model_dump_json(),
               *(r.model_dump_json() for r in service.runs()), service.doctor().model_dump_json()]
    assert not [a for a in answers if CANARY in a]
    folder = service.store.get(run)
    leaks = [p for p in folder.path.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaks == []
    history = subprocess.run(["git", "-C", str(folder.ledger), "log", "-p", "--all"], capture_output=True, text=True)
    assert history.returncode == 0 and CANARY not in history.stdout
    assert "[redacted OPENAI_API_KEY]" in folder.file("ledger/agentdescent/rollouts.jsonl").read_text()


def test_a_store_on_a_read_only_disk_is_a_clear_error(tmp_path, monkeypatch):
    with _tmpfs(tmp_path / "ro", options="ro") as folder:
        monkeypatch.setenv("AGENTDESCENT_HOME", str(folder / "home"))
        monkeypatch.chdir(ROOT)
        with pytest.raises(UserError, match="cannot create a run in .*AGENTDESCENT_HOME"):
            Service().start(domain.spec(tmp_path))


def test_a_store_made_read_only_is_named_so_and_still_answers_a_dry_run(tmp_path, monkeypatch):
    """Start and resume said "cannot take run .targets's <hash>.lock" (no run is named .targets),
    and accept --dry-run, which writes nothing, was refused for the accept's lock."""
    with _tmpfs(tmp_path / "store", options="size=64m") as folder:
        monkeypatch.setenv("AGENTDESCENT_HOME", str(folder / "home"))
        monkeypatch.chdir(ROOT)
        made = Service()
        run = made.start(domain.spec(tmp_path, rounds=2)).run_id
        assert wait(made, run).state == "finished"
        deadline = time.monotonic() + 60  # the run's process, still exiting, holds files open for writing: EBUSY
        while made.store.get(run).alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        while (remount := subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True)).returncode:
            assert time.monotonic() < deadline, remount.stderr  # busy while that process, its lock let go, exits
            time.sleep(0.1)
        with pytest.raises(UserError, match="read-only file system") as started:
            made.start(domain.spec(tmp_path, rounds=2))
        said = str(started.value)
        assert f"the run store {folder / 'home' / 'runs'} is on a read-only file system; mount it writable" in said
        assert ".targets's" not in said
        dry = made.accept(run, dry_run=True)
        assert dry.written == ["prompt.md"] and "nothing was touched" in dry.message
        with pytest.raises(UserError, match="accept.lock: the run store .* is on a read-only file system"):
            made.accept(run)


def test_accept_on_a_full_store_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    """The target's lock took the writer's pid through its descriptor, whose error names no file:
    accept said only 'cannot write: No space left on device'."""
    with _tmpfs(tmp_path / "disk", options="size=16m") as folder:
        monkeypatch.setenv("AGENTDESCENT_HOME", str(folder / "home"))
        monkeypatch.chdir(ROOT)
        made = Service()
        (tmp_path / "work").mkdir()
        run = made.start(domain.spec(tmp_path / "work", rounds=2)).run_id
        assert wait(made, run).state == "finished"
        with contextlib.suppress(OSError), (folder / "filler").open("wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
        told = subprocess.run([sys.executable, "-m", "agentdescent", "accept", run], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={**os.environ})
        assert told.returncode != 0 and "No space left on device" in told.stderr
        assert f"cannot write {folder / 'home' / 'backups'}/" in told.stderr, told.stderr
        assert (tmp_path / "work" / "prompt.md").read_text(encoding="utf-8") == "Answer with the code.\n"


def test_a_store_on_a_full_disk_stops_the_run_cleanly_and_it_resumes_once_there_is_room(tmp_path, monkeypatch):
    with _tmpfs(tmp_path / "disk", options="size=16m") as folder:
        monkeypatch.setenv("AGENTDESCENT_HOME", str(folder / "home"))
        monkeypatch.setenv("KEYWORD_DELAY", "0.01")
        monkeypatch.chdir(ROOT)
        made = Service()
        (tmp_path / "work").mkdir()
        run = made.start({**domain.spec(tmp_path / "work"), "rounds": 200, "target_reward": None}).run_id
        wait(made, run, until=lambda s: s.round >= 2)
        filler = folder / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as handle:  # the disk fills up under the run
            while True:
                handle.write(b"\0" * 65536)
        stopped = wait(made, run)
        assert stopped.state in ("failed", "interrupted"), stopped  # interrupted: not even the status could be written
        said = f"{stopped.error} {stopped.stop_reason} {stopped.message}".lower()
        assert ("no space left" in said or "couldn't write" in said) and "resume" in stopped.next
        fsck = subprocess.run(["git", "-C", str(made.store.get(run).ledger), "fsck"], capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stderr
        committed = len(step_commits(made.store.get(run).ledger))
        filler.unlink()
        made.resume(run)
        done = wait(made, run)
        assert done.state == "finished" and done.round == 200
        assert len(step_commits(made.store.get(run).ledger)) == domain.RULES >= committed


@contextlib.contextmanager
def _tmpfs(folder: Path, *, options: str):
    """A tmpfs mounted at `folder` (read-only, or small); the test is skipped where mounting is not allowed."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to stand in for the disk: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state != "Z"
