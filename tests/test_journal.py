"""The rollout journal is written behind: entries from many threads reach the file as JSON lines,
soon on their own, at once on `flush` (before a checkpoint counts them), and all of them on close."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agentdescent.engine.journal import FLUSH_S, Journal


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
    while not lines_of(journal.path) and time.monotonic() < deadline:
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
    from agentdescent.engine.checkpoint import RunFiles
    from agentdescent.types import Rollout, Task

    tasks = {f"t{i}": Task(id=f"t{i}", prompt=str(i)) for i in range(5)}
    files = RunFiles(tmp_path)
    for task in tasks.values():
        files.record("state", Rollout(task=task, output="ok", reward=1.0))
    files.record("state", Rollout(task=tasks["t0"], output="", reward=0.0, error="run failed"))  # not journalled
    files.flush()  # what a checkpoint does before it reads journal_lines
    assert files.journal_lines == 5
    assert [r.task.id for _, r in RunFiles(tmp_path).rollouts(tasks)] == list(tasks)
    files.close()
    files.record("state", Rollout(task=tasks["t1"], output="late", reward=1.0))  # after the run: nothing
    assert len(RunFiles(tmp_path).rollouts(tasks)) == 5
