"""The rollout journal is written behind: entries from many threads reach the file as JSON lines,
soon on their own, at once on `flush` (before a checkpoint counts them), and all of them on close."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agentdescent.engine.persist.checkpoint import RunFiles
from agentdescent.engine.persist.journal import FLUSH_S, Journal
from agentdescent.types import Rollout, Task
from agentdescent.usage import Usage

TASKS = {f"t{i}": Task(id=f"t{i}", prompt=str(i)) for i in range(5)}


def lines_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_entries_from_many_threads_are_each_written_once_as_a_line(tmp_path):
    journal = Journal(tmp_path / "run" / "journal.jsonl", lambda n: {"n": n})
    threads = [threading.Thread(target=lambda k=k: [journal.add(k * 100 + i) for i in range(100)]) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    journal.flush()
    assert sorted(e["n"] for e in lines_of(journal.path)) == list(range(800))
    assert journal.lines == 800
    journal.close()


def test_a_line_reaches_the_disk_on_its_own_soon_after_its_entry(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", lambda n: {"n": n})
    journal.add(1)
    deadline = time.monotonic() + 50 * FLUSH_S  # generous: the machine may be busy
    while journal.lines < 1 and time.monotonic() < deadline:  # counted just after the line is written
        time.sleep(FLUSH_S / 4)
    assert lines_of(journal.path) == [{"n": 1}] and journal.lines == 1
    journal.add(2)  # and again after the first write
    while len(lines_of(journal.path)) < 2 and time.monotonic() < deadline:
        time.sleep(FLUSH_S / 4)
    assert lines_of(journal.path) == [{"n": 1}, {"n": 2}]
    journal.close()


def test_close_writes_what_is_queued_and_later_entries_go_nowhere(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", lambda n: {"n": n})
    for i in range(5):
        journal.add(i)
    journal.close()
    assert [e["n"] for e in lines_of(journal.path)] == [0, 1, 2, 3, 4]


def test_the_writer_thread_ends_with_the_journal_though_closed_while_it_gathers(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", lambda n: {"n": n})
    journal.add(0)
    time.sleep(FLUSH_S / 5)  # the writer is in its gathering sleep
    journal.close()
    journal._writer.join(50 * FLUSH_S)
    assert not journal._writer.is_alive()  # one left per run would pile up in a long-lived server
    assert lines_of(journal.path) == [{"n": 0}]


class FullDisk:
    """A file on a disk with no room left."""

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None: ...

    def close(self) -> None: ...


def test_a_write_behind_that_fails_is_raised_by_the_next_flush(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", lambda n: {"n": n})
    journal.add(0)
    journal.flush()
    opened, journal._file = journal._file, FullDisk()
    journal.add(1)
    deadline = time.monotonic() + 50 * FLUSH_S
    while journal._failed is None and time.monotonic() < deadline:  # the writer's own attempt
        time.sleep(FLUSH_S / 4)
    with pytest.raises(OSError, match="No space left"):
        journal.flush()  # what a checkpoint does first: the run stops and says why
    assert journal.lines == 1
    opened.close()
    journal.close()


def test_the_run_files_count_only_lines_on_disk_once_flushed_and_a_later_process_reads_them(tmp_path):
    files, usage = RunFiles(tmp_path), Usage()
    for task in TASKS.values():
        usage.count_rollout(Rollout(task=task, output="ok", reward=1.0), journal=lambda r: files.record("state", r))
    failed = Rollout(task=TASKS["t0"], output="", reward=0.0, error="run failed")
    usage.count_rollout(failed, journal=lambda r: files.record("state", r))  # counted, not journalled
    saved, counted, _ = files.counted(usage)  # what a checkpoint does: the lines it counts are on disk after
    assert (saved["rollouts"], saved["failures"], counted) == (6, 1, 5)
    assert [r.task.id for _, r in RunFiles(tmp_path).rollouts(TASKS)] == list(TASKS)
    files.close()
    files.record("state", Rollout(task=TASKS["t1"], output="late", reward=1.0))  # after the run: nothing
    assert len(RunFiles(tmp_path).rollouts(TASKS)) == 5


def test_a_rollout_that_lands_while_a_checkpoint_is_taken_is_counted_once_by_the_resumed_run(tmp_path, monkeypatch):
    """The checkpoint reads the usage and the journal's length at one instant: a rollout counted
    and journalled while the lines are being put on disk is in neither, so a resumed run counts
    its line again, once. (Read one after the other, the line was on disk among those counted
    and the rollout was not in the saved usage: a paid call lost from the bill.)"""
    files, usage = RunFiles(tmp_path), Usage()

    def land(task_id: str) -> None:  # a rollout's thread: counted and journalled
        usage.count_rollout(Rollout(task=TASKS[task_id], output="ok", reward=1.0), journal=lambda r: files.record("state", r))

    for task_id in ("t0", "t1", "t2"):
        land(task_id)
    flush = Journal.flush

    def flush_as_one_more_lands(journal: Journal) -> None:
        monkeypatch.setattr(Journal, "flush", flush)
        land("t3")
        flush(journal)

    monkeypatch.setattr(Journal, "flush", flush_as_one_more_lands)
    saved, counted, _ = files.counted(usage)
    files.flush()
    on_disk = RunFiles(tmp_path).rollouts(TASKS)
    assert saved["rollouts"] + len(on_disk[counted:]) == usage.rollouts == 4  # what `Loop._resume` adds up


def test_a_run_file_that_is_no_file_of_its_own_is_damage_not_a_hang_nor_a_write_elsewhere(tmp_path):
    """A FIFO journal hung `runs` for the whole store, and a start log linked outside was written
    through (a byte a call) and counted as the bill."""
    import os

    from agentdescent.errors import UserError

    files = RunFiles(tmp_path / "ledger")
    files.folder.mkdir(parents=True)
    os.mkfifo(files.rollouts_path)
    start = time.monotonic()
    with pytest.raises(UserError, match="journal .* is not what the run wrote"):
        files.bill()
    assert time.monotonic() - start < 10
    outside = tmp_path / "precious.txt"
    outside.write_text("precious data\n", encoding="utf-8")
    files.starts.path.symlink_to(outside)
    assert files.starts.count() == 0
    with pytest.raises(UserError, match="start log .* is not a regular file"):
        files.starts.mark()
    assert outside.read_text(encoding="utf-8") == "precious data\n"
