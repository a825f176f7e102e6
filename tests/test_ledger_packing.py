"""The ledger packs its objects as a run goes: a long run's ledger grows with its commits, not their
square, and every version reads back through packings of its own, of another process's, and one
killed half way."""

import multiprocessing
import os
import signal
import subprocess
import time

import gitdb.db.loose
import pytest

from agentdescent.errors import HeadMoved
from agentdescent.ledger import Ledger, ledger, objects

EVERY = 10


def _git(path, *args):
    return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=True).stdout


def _counted(path) -> dict[str, int]:
    """`git count-objects -v`: loose objects (`count`), packed ones (`in-pack`), their KB (`size`, `size-pack`)."""
    return {k: int(v) for k, v in (line.split(": ") for line in _git(path, "count-objects", "-v").splitlines())}


def _grow(store, n, start=0) -> list[str]:
    """`n` commits of a playbook a rule longer each time, after `start` rules; each version's text."""
    texts = []
    with Ledger(store) as led:
        for k in range(start, start + n):
            text = "".join(f"- rule {i}: when a request names word{i}, send it to handler {i % 5}.\n" for i in range(k + 1))
            led.commit("a", {"SKILL.md": text, "references/api.md": "the api\n" * 50}, expected_version=led.head(),
                       message=f"rule {k}")
            texts.append(text)
    return texts


@pytest.fixture
def every(monkeypatch):
    monkeypatch.setattr(ledger, "PACK_EVERY", EVERY, raising=False)


def test_a_long_ledger_is_packed_and_grows_with_its_commits_not_their_square(tmp_path, every):
    """Every object stayed loose, each version of a growing text stored whole in a file of its own:
    800 commits of a playbook took 17 MB on disk where a pack takes 0.6 MB."""
    store = tmp_path / "ledger"
    texts = _grow(store, 2 * EVERY)  # versions 1..20: the last commit packs
    counted = _counted(store)
    assert counted["count"] == 0 and counted["in-pack"] > 0
    texts += _grow(store, 6 * EVERY, start=len(texts))
    # Four times the commits: the texts committed hold about sixteen times the bytes, the packs four times.
    assert _counted(store)["size-pack"] < 8 * counted["size-pack"]
    assert _counted(store)["size-pack"] * 1024 < sum(map(len, texts)) / 3
    texts += _grow(store, EVERY - 3, start=len(texts))
    assert 0 < _counted(store)["count"] <= 6 * (EVERY - 3)  # only what the commits since the last packing wrote
    with Ledger(store) as led:  # every version reads back, its texts from the packs
        assert [led.snapshot("a", v)["SKILL.md"] for v in range(1, len(texts) + 1)] == texts
    _git(store, "fsck", "--strict", "--no-progress")


def test_a_reader_reads_on_when_another_process_packs_what_it_read_loose(tmp_path, monkeypatch):
    """A ledger remembers the path of each loose object it read; once another process's repack had
    taken the loose copy away, reading the object again (a tree its memo had let go) said the
    ledger was damaged: "its object ... is missing"."""
    monkeypatch.setattr(objects, "VERSIONS_KEPT", 1)  # each version's trees read again when asked for again
    store = tmp_path / "ledger"
    texts = _grow(store, 6)
    with Ledger(store) as reader:
        assert [reader.snapshot("a", v)["SKILL.md"] for v in range(1, 7)] == texts
        _git(store, "repack", "-d", "-q")  # another process's packing
        assert _counted(store)["count"] == 0
        assert [reader.snapshot("a", v)["SKILL.md"] for v in range(1, 7)] == texts


def test_a_loose_write_whose_folder_vanished_under_it_is_written_again(tmp_path, monkeypatch):
    """A repack of another process removes the object folders it empties: one gitdb had just made
    for a new object was gone before the object's rename into it."""
    real, failed = gitdb.db.loose.rename, []

    def rename(src, dst):
        if not failed:
            failed.append(dst)
            raise FileNotFoundError(2, "No such file or directory", dst)
        return real(src, dst)

    with Ledger(tmp_path / "ledger") as led:
        monkeypatch.setattr(gitdb.db.loose, "rename", rename)
        assert led.commit("a", {"k": "v"}, expected_version=0, message="one") == 1
        monkeypatch.undo()
        assert failed and led.snapshot("a") == {"k": "v"}
    _git(tmp_path / "ledger", "fsck", "--strict", "--no-progress")


def _writer(path, index, n):
    ledger.PACK_EVERY = 4  # a spawned process: its own module, set here
    with Ledger(path) as led:
        for i in range(n):
            while True:
                head = led.head()
                state = led.snapshot("a", head) if led.has_artifact("a", head) else {}
                try:
                    led.commit("a", {**state, f"p{index}-{i}": "x" * 2000 + str(i)}, expected_version=head,
                               message=f"p{index}-{i}")
                    break
                except HeadMoved:
                    continue


def test_processes_committing_and_packing_one_ledger_lose_nothing(tmp_path):
    store = tmp_path / "ledger"
    Ledger(store).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(store), i, 20)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with Ledger(store) as led:
        assert led.head() == 60 and set(led.snapshot("a")) == {f"p{i}-{j}" for i in range(3) for j in range(20)}
        assert all(len(led.snapshot("a", v)) == v for v in range(1, 61))
    assert _counted(store)["in-pack"] > 0
    _git(store, "fsck", "--strict", "--no-progress")


def test_a_packing_killed_half_way_leaves_every_version_and_the_next_packing_works(tmp_path, every):
    store = tmp_path / "ledger"
    texts = _grow(store, EVERY - 1)  # loose, all of them
    for delay in (0.0, 0.002, 0.005, 0.01, 0.02):  # killed wherever it is by then
        repack = subprocess.Popen(["git", "-C", str(store), "repack", "-a", "-d", "-q"], start_new_session=True)
        time.sleep(delay)
        os.killpg(repack.pid, signal.SIGKILL)
        repack.wait()
        with Ledger(store) as led:
            assert [led.snapshot("a", v)["SKILL.md"] for v in range(1, len(texts) + 1)] == texts
    texts += _grow(store, 1, start=len(texts))  # version 10: packs
    assert _counted(store)["count"] == 0
    with Ledger(store) as led:
        assert [led.snapshot("a", v)["SKILL.md"] for v in range(1, len(texts) + 1)] == texts
    _git(store, "fsck", "--strict", "--no-progress")


def test_a_run_cancelled_on_a_packed_ledger_resumes_to_the_commits_of_the_run_left_alone(tmp_path, monkeypatch):
    from agentdescent import events as ev
    from agentdescent import evolve
    from agentdescent.engine.calls.cancel import CancelToken
    from tests.test_resume import RULES, cancel_at, commits, keyword_reward, keyword_run_options, keyword_tasks

    monkeypatch.setattr(ledger, "PACK_EVERY", 2, raising=False)
    whole = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(tmp_path / "whole"))
    token, store = CancelToken(), tmp_path / "cut"
    stopped = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store), stop=[token],
                     on_event=cancel_at(token, ev.RoundEnded, 2))
    assert stopped.error == "cancelled" and _counted(store)["in-pack"] > 0
    resumed = evolve(keyword_tasks(), keyword_reward, **keyword_run_options(store))
    assert resumed.error is None and resumed.final_reward == 1.0 and resumed.state == whole.state
    assert commits(store) == commits(tmp_path / "whole") and len(commits(store)) == RULES
    assert resumed.usage.calls == whole.usage.calls
    assert _counted(store)["count"] <= 6  # the objects of the last commit at most: the rest packed
