import gc
import multiprocessing
import shutil
import subprocess
import threading
import tracemalloc

import git
import pytest

from agentdescent.errors import HeadMoved, LedgerDamaged, LedgerError, UserError
from agentdescent.ledger import CommitRecord, Ledger, objects

STATE = {
    "prompt.md": "You are helpful.\n",
    "references/api.md": "# API — ünïcödé ✓\n",
    "references/deep/notes.txt": "no trailing newline",
    "empty": "",
}


def _git(path, *args):
    run = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=True)
    return run.stdout


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "ledger")


# ---- create, commit, snapshot ----------------------------------------------------------------


def test_create_starts_at_zero(ledger):
    assert ledger.head() == 0 and ledger.stable() == 0
    root = CommitRecord(version=0, sha=ledger.sha(0), message="ledger created", trailers={"Version": "0"})
    assert ledger.log() == [root]
    assert not ledger.has_artifact("a")


def test_commit_and_snapshot_round_trip(ledger):
    assert ledger.commit("a", STATE, expected_version=0, message="first") == 1
    assert ledger.head() == 1 and ledger.has_artifact("a") and not ledger.has_artifact("a", 0)
    assert ledger.snapshot("a") == STATE
    assert Ledger(ledger.path).snapshot("a", 1) == STATE  # read back from git, not from the cache


def test_snapshot_is_a_copy(ledger):
    ledger.commit("a", {"k": "v"}, expected_version=0, message="m")
    ledger.snapshot("a")["k"] = "mutated"
    assert ledger.snapshot("a") == {"k": "v"}


def test_empty_state(ledger):
    ledger.commit("a", {}, expected_version=0, message="empty")
    assert ledger.has_artifact("a") and ledger.snapshot("a") == {}
    assert Ledger(ledger.path).snapshot("a") == {}


def test_old_versions_and_other_artifacts(ledger):
    ledger.commit("a", {"k": "one"}, expected_version=0, message="a1")
    ledger.commit("b", {"k": "bee"}, expected_version=1, message="b1")
    ledger.commit("a", {"k": "two"}, expected_version=2, message="a2")
    assert [ledger.snapshot("a", v) for v in (1, 2, 3)] == [{"k": "one"}, {"k": "one"}, {"k": "two"}]
    assert ledger.snapshot("b") == {"k": "bee"}
    fresh = Ledger(ledger.path)
    assert fresh.snapshot("a", 1) == {"k": "one"} and fresh.snapshot("b", 3) == {"k": "bee"}


def held_after(commits: int, folder) -> int:
    """The bytes a ledger holds on to after `commits` versions, each four rules longer than the last."""
    tracemalloc.start()
    try:
        ledger, state = Ledger(folder), {}
        before = tracemalloc.get_traced_memory()[0]
        for i in range(commits):
            state.update({f"rule-{i:03d}-{j}": f"rule {i}.{j}: " + "x" * 60 for j in range(4)})
            ledger.commit("a", dict(state), expected_version=i, message=f"v{i}")
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_what_a_ledger_remembers_of_its_versions_grows_with_its_commits_not_their_square(tmp_path, monkeypatch):
    """It kept every version whole (its files, its texts), for good: a playbook run of a thousand
    commits held each of its thousand playbooks."""
    monkeypatch.setattr(objects, "VERSIONS_KEPT", 4, raising=False)
    held_after(8, tmp_path / "warm")  # what the first ledger of a process allocates for good (imports, caches)
    # Four times the commits: about four times the memory if it grows with them, sixteen with their
    # square; a span this wide keeps the hash tables' doubling steps from reading as growth.
    assert held_after(120, tmp_path / "four") < 8 * held_after(30, tmp_path / "one")
    ledger = Ledger(tmp_path / "four")
    assert len(ledger.snapshot("a", 1)) == 4 and len(ledger.snapshot("a")) == 480  # the versions let go are read back
    assert len(ledger.snapshot("a", 2)) == 8


def test_unknown_version_and_missing_artifact(ledger):
    ledger.commit("a", {"k": "v"}, expected_version=0, message="m")
    for bad in (2, -1):
        with pytest.raises(UserError, match="unknown version"):
            ledger.snapshot("a", bad)
    with pytest.raises(UserError, match="'b' is not in the ledger"):
        ledger.snapshot("b")
    with pytest.raises(UserError, match="not in the ledger at version 0"):
        ledger.snapshot("a", 0)


# ---- it is a real git repository ---------------------------------------------------------------


def test_repo_is_real_git(ledger):
    ledger.commit("a", STATE, expected_version=0, message="first\nline", trailers={"Diff-Id": "d1\nd2"})
    ledger.commit("a", {**STATE, "prompt.md": "Be brief.\n"}, expected_version=1, message="second")
    bodies = _git(ledger.path, "log", "--format=%B", "dev")
    assert "first line\n\nVersion: 1\nDiff-Id: d1 d2" in bodies and "second\n\nVersion: 2" in bodies
    assert _git(ledger.path, "show", "dev:artifacts/a/prompt.md") == "Be brief.\n"
    assert _git(ledger.path, "show", "dev~1:artifacts/a/references/api.md") == STATE["references/api.md"]
    assert "+Be brief." in _git(ledger.path, "log", "-p", "dev")
    subprocess.run(["git", "-C", str(ledger.path), "fsck", "--strict"], check=True, capture_output=True)
    assert git.Repo(ledger.path).bare
    assert ledger.log(limit=1)[0].trailers == {"Version": "2"}


def test_trailer_keys_are_validated(ledger):
    for bad in ("Version", "bad key", ""):
        with pytest.raises(UserError, match="trailer"):
            ledger.commit("a", {}, expected_version=0, message="m", trailers={bad: "x"})


# ---- changed keys and version vectors ----------------------------------------------------------


def test_stale_commit_raises_head_moved_and_writes_nothing(ledger):
    ledger.commit("a", {"k": "1"}, expected_version=0, message="m")
    dev = ledger.sha(1)
    with pytest.raises(HeadMoved) as info:
        ledger.commit("a", {"k": "2"}, expected_version=0, message="stale")
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert ledger.head() == 1 and ledger.sha(1) == dev and ledger.snapshot("a") == {"k": "1"}


def test_cas_loses_when_another_writer_moves_dev_in_between(ledger, monkeypatch):
    """The ref check passes but another process moves dev before update-ref: the CAS must fail."""
    other = Ledger(ledger.path)
    real = ledger._write_root

    def race(*args):
        tree = real(*args)
        other.commit("a", {"k": "theirs"}, expected_version=0, message="theirs")
        return tree

    monkeypatch.setattr(ledger, "_write_root", race)
    with pytest.raises(HeadMoved) as info:
        ledger.commit("a", {"k": "ours"}, expected_version=0, message="ours")
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert ledger.snapshot("a") == {"k": "theirs"} and ledger.head() == 1


def _commit_with_retry(ledger, name):
    while True:
        head = ledger.head()
        state = ledger.snapshot("a", head) if ledger.has_artifact("a", head) else {}
        try:
            return ledger.commit("a", {**state, name: name}, expected_version=head, message=name)
        except HeadMoved:
            continue


def _process_worker(path, index, n):
    ledger = Ledger(path)
    for i in range(n):
        _commit_with_retry(ledger, f"p{index}-{i}")


def _assert_no_lost_commits(ledger, n):
    assert ledger.head() == n
    assert len(ledger.snapshot("a")) == n
    assert sorted(r.version for r in ledger.log()) == list(range(n + 1))


def test_two_processes_lose_no_commit(ledger):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_worker, args=(str(ledger.path), i, 25)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    _assert_no_lost_commits(ledger, 50)
    assert set(ledger.snapshot("a")) == {f"p{i}-{j}" for i in range(2) for j in range(25)}


def test_threads_sharing_a_ledger_lose_no_commit(ledger):
    threads = [
        threading.Thread(target=lambda i=i: [_commit_with_retry(ledger, f"t{i}-{j}") for j in range(10)])
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _assert_no_lost_commits(ledger, 40)


# ---- reopen, bad paths, bad keys, promote -----------------------------------------------------


def test_reopen_continues_from_head(ledger):
    ledger.commit("a", {"k": "1"}, expected_version=0, message="m")
    again = Ledger(ledger.path)
    assert again.head() == 1
    assert again.commit("a", {"k": "2"}, expected_version=1, message="m") == 2
    assert ledger.head() == 2 and ledger.snapshot("a") == {"k": "2"}


def test_empty_directory_becomes_a_ledger(tmp_path):
    assert Ledger(tmp_path).head() == 0


def test_bad_paths(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(UserError, match="is a file.*store="):
        Ledger(file)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(UserError, match="not a git ledger.*store="):
        Ledger(other)
    repo = git.Repo.init(tmp_path / "repo")
    repo.index.commit("unrelated")
    with pytest.raises(UserError, match="refs/heads/dev.*store="):
        Ledger(tmp_path / "repo")


def test_corrupt_dev_ref(ledger):
    (ledger.path / "refs" / "heads" / "dev").write_text("1" * 40 + "\n")
    with pytest.raises(LedgerDamaged, match=f"is damaged \\(its object {'1' * 40} is missing\\)"):
        Ledger(ledger.path)


@pytest.mark.parametrize("damage", ["dev removed", "objects removed"])
def test_a_ledger_something_else_took_part_of_is_damaged_not_another_repository(ledger, damage):
    if damage == "dev removed":
        (ledger.path / "refs" / "heads" / "dev").unlink()
        named = "its ref refs/heads/dev is missing"
    else:
        shutil.rmtree(ledger.path / "objects")
        named = "it is no git repository any more"
    with pytest.raises(LedgerDamaged, match=f"is damaged \\({named}.*something other than AgentDescent changed it"):
        Ledger(ledger.path)


BAD_KEYS = ["../x", "/abs", "a//b", ".git/config", "", "a/./b", "a\\b", "a/", "A/.GIT"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys(ledger, key):
    with pytest.raises(UserError, match="invalid key"):
        ledger.commit("a", {key: "x"}, expected_version=0, message="m")
    assert ledger.head() == 0


def test_bad_states_and_artifact_ids(ledger):
    with pytest.raises(UserError, match="both a file and a folder"):
        ledger.commit("a", {"x": "1", "x/y": "2"}, expected_version=0, message="m")
    with pytest.raises(UserError, match="must be str"):
        ledger.commit("a", {"x": 1}, expected_version=0, message="m")
    for bad in ("a/b", "..", ""):
        with pytest.raises(UserError, match="artifact id"):
            ledger.commit(bad, {}, expected_version=0, message="m")


def test_promote_and_stable(ledger):
    for v in range(3):
        ledger.commit("a", {"k": str(v)}, expected_version=v, message="m")
    ledger.promote(2)
    assert ledger.stable() == 2 and ledger.head() == 3
    assert _git(ledger.path, "rev-parse", "stable").strip() == ledger.sha(2)
    with pytest.raises(UserError, match="unknown version"):
        ledger.promote(9)


# ---- a read cut short -------------------------------------------------------------------------


# the timer's KeyboardInterrupt can land in a destructor too, which Python reports and ignores
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed by git gc"])
def test_reads_cut_short_by_ctrl_c_leave_every_later_read_right(tmp_path, packed):
    """Ctrl-C lands wherever the main thread is, a ledger read too. Reads are cut short here at
    random points (a timer's signal raising KeyboardInterrupt); every read after one must still
    give each version's own text. Seen before: GitPython's persistent `git cat-file` kept the
    rest of the cut answer in its pipe, and the next reads got it (a Ctrl-C'd run then hung in
    CI instead of ending); and a cut walk of the history left versions unindexed below it."""
    import random
    import signal

    writer = Ledger(tmp_path / "ledger")
    texts = {f"v{i}.md": f"text {i} " * 3000 for i in range(40)}
    versions = [writer.commit("a", {k: t for k, t in texts.items() if k <= key}, expected_version=v,
                              message=f"add {key}") for v, key in enumerate(sorted(texts))]
    writer.close()
    if packed:
        _git(tmp_path / "ledger", "gc", "-q")

    armed = False

    def interrupt(*_):
        if armed:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    rng, cut = random.Random(0), 0
    try:
        for _ in range(200):  # until ten reads were cut: how many land depends on the machine's speed
            if cut >= 10:
                break
            with Ledger(tmp_path / "ledger") as ledger:
                try:
                    armed = True
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.02))
                    for version in versions:
                        ledger.snapshot("a", version)
                except KeyboardInterrupt:
                    cut += 1
                finally:
                    armed = False
                    signal.setitimer(signal.ITIMER_REAL, 0)
                for version, key in zip(versions, sorted(texts)):
                    assert ledger.snapshot("a", version)[key] == texts[key]
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert cut >= 10  # reads were cut short at ten points at least


def test_a_git_hooks_environment_leaves_the_users_repository_alone(tmp_path, monkeypatch):
    """Inside a hook, git sets GIT_DIR (and more) for the user's repository; `git init` followed them."""
    user = tmp_path / "user"
    subprocess.run(["git", "init", "-q", str(user)], check=True)
    monkeypatch.setenv("GIT_DIR", str(user / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(user))
    monkeypatch.setenv("GIT_INDEX_FILE", str(user / ".git" / "index"))
    with Ledger(tmp_path / "ledger") as led:
        led.commit("a", {"k": "v"}, expected_version=0, message="one")
        assert led.head() == 1 and led.snapshot("a") == {"k": "v"}
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    monkeypatch.delenv("GIT_INDEX_FILE")
    bare = subprocess.run(["git", "-C", str(user), "config", "core.bare"], capture_output=True, text=True)
    assert bare.stdout.strip() == "false"
    assert subprocess.run(["git", "-C", str(user), "for-each-ref"], capture_output=True, text=True).stdout == ""


def test_an_object_directory_set_for_another_repository_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(tmp_path / "elsewhere"))
    with pytest.raises(UserError, match="GIT_OBJECT_DIRECTORY is set in this environment.*unset it"):
        Ledger(tmp_path / "ledger")


def test_a_global_hooks_path_never_runs_on_the_ledgers_ref_updates(tmp_path, monkeypatch):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "reference-transaction").write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\nexit 1\n")
    (hooks / "reference-transaction").chmod(0o755)
    (tmp_path / "gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    with Ledger(tmp_path / "ledger") as led:
        led.commit("a", {"k": "v"}, expected_version=0, message="one")
        assert led.head() == 1
    assert not (tmp_path / "ran").exists()


def test_an_empty_dev_ref_is_damage_named_not_an_assertion(tmp_path):
    Ledger(tmp_path / "ledger").close()
    (tmp_path / "ledger" / "refs" / "heads" / "dev").write_text("")
    with pytest.raises(LedgerDamaged, match="its ref refs/heads/dev names no commit: «the file is empty»") as damaged:
        Ledger(tmp_path / "ledger")
    assert damaged.value.ref == "refs/heads/dev"


def test_git_locks_a_killed_commit_left_are_cleared_by_the_next_opener_alone(tmp_path):
    """A SIGKILL inside `git update-ref` left refs/heads/dev.lock and HEAD.lock: every later
    commit failed with "cannot lock ref", and each `resume` paid for a round before failing."""
    path = tmp_path / "ledger"
    with Ledger(path) as first:
        first.commit("a", STATE, expected_version=0, message="first")
    left = [path / "refs" / "heads" / "dev.lock", path / "HEAD.lock"]
    for lock in left:
        lock.write_text("0" * 40 + "\n", encoding="ascii")
    with Ledger(path) as reopened:
        assert not any(lock.exists() for lock in left)
        in_use = path / "refs" / "heads" / "dev.lock"
        in_use.write_text("0" * 40 + "\n", encoding="ascii")  # another's commit under way, as far as a second opener knows
        with Ledger(path) as second:
            assert in_use.exists()  # someone has the ledger open: nothing is removed under them
            in_use.unlink()
            assert second.head() == 1
        assert reopened.commit("a", {"k": "v2"}, expected_version=1, message="second") == 2


def test_a_git_failure_is_told_in_one_bounded_line(tmp_path):
    """git's stderr spans lines ("Another git process seems to be running..."); a run's status line
    and the `runs` table broke on it."""
    with Ledger(tmp_path / "ledger") as ledger:
        (tmp_path / "ledger" / "refs" / "heads" / "dev.lock").write_text("x\n", encoding="ascii")
        with pytest.raises(LedgerError) as failed:
            ledger.commit("a", STATE, expected_version=0, message="first")
    said = str(failed.value)
    assert "\n" not in said and "git update-ref failed in" in said and "«" in said and "dev.lock" in said


def test_a_ledger_under_a_folder_whose_name_holds_a_dollar_is_the_one_at_that_path(tmp_path, monkeypatch):
    """GitPython expanded `$HOME` in the path it was given, and in its git commands' working
    folder: a store under a folder named `cost$HOME` was made elsewhere, and every run failed."""
    from agentdescent.report.data import artifact_ids

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "cost$HOME" / "ledger"
    with Ledger(path) as led:
        led.commit("a", {"k": "one"}, expected_version=0, message="one")
    _git(path, "gc", "-q")  # packed: read through `git cat-file`, run in the repository's folder
    with Ledger(path) as led:
        assert led.snapshot("a", 1) == {"k": "one"}
        assert led.commit("a", {"k": "two"}, expected_version=1, message="two") == 2  # `git update-ref` there too
    assert artifact_ids(path) == ["a"]
    assert _git(path, "log", "--format=%s", "dev").split() == ["two", "one", "ledger", "created"]
    assert not (tmp_path / "cost").exists()  # where the expanded path would be


def test_a_store_no_ledger_can_be_made_in_is_a_user_error_naming_why(tmp_path):
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(UserError, match=r"runs through .*notes\.txt, a file, not a folder; choose an empty or new"):
        Ledger(tmp_path / "notes.txt" / "ledger")
    with pytest.raises(UserError, match=r"no ledger can be made there \(No such file or directory\)"):
        Ledger("/proc/no-such-process/ledger")
