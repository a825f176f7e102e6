"""The git-backed Ledger: one real git repository per run, one commit per optimizer step.

The repository is bare (nothing is ever checked out). Each artifact is a folder
`artifacts/<artifact_id>/` in the commit tree, one file per key, so `git log -p dev` shows every
step as an ordinary diff. Versions are integers (root = 0, each commit = parent + 1) stored as a
`Version: N` trailer. `dev` moves only by compare-and-swap (`git update-ref dev <new> <old>`), so
concurrent writers in threads or processes never lose a commit: the loser gets `HeadMoved`.
`stable` is moved by `promote`.

Objects are read and written by `objects.GitObjects` (in-process, memoised: objects never
change) and the refs by `refs.Refs` (the CAS is the only subprocess per commit). What is left
here is what versions mean: the index from version to commit, memoised too, since `dev`'s
history only ever grows.

Every `PACK_EVERY` versions, the commit that reaches one packs the repository's objects
(`GitObjects.pack`). Left out: merging, rebasing and retry policy (the aggregator's job),
strategies and rendering, remotes, and any working tree.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import git

from agentdescent import filelock, reading
from agentdescent.errors import HeadMoved, LedgerDamaged, LedgerError, UserError
from agentdescent.governance import unsafe_key_reason
from agentdescent.ledger.gitobjects import TREE_MODE, commit_bytes, format_message, parse_commit
from agentdescent.ledger.objects import PACK_EVERY, GitObjects
from agentdescent.ledger.refs import DEV, NULL_SHA, STABLE, Refs, git_failure
from agentdescent.ledger.repository import NO_HOOKS, repository

__all__ = ["CommitRecord", "Ledger"]

ARTIFACTS = "artifacts"
_FIX = "choose an empty or new directory for store="
# What git reads for the repository it works in (`git rev-parse --local-env-vars`): a git hook sets
# them for the user's repository, which the ledger's git must never touch.
_REPOSITORY_VARIABLES = ("GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                         "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE",
                         "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
                         "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR")
# Of those, the ones GitPython follows too, so that the ledger's objects or refs would go there.
_REFUSED_VARIABLES = ("GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


@dataclass(frozen=True, kw_only=True)
class CommitRecord:
    """One commit on `dev`: its version, sha, subject line and trailers."""

    version: int
    sha: str
    message: str
    trailers: dict[str, str]


def _check_key(key: object) -> None:
    reason = unsafe_key_reason(key) if isinstance(key, str) else f"key {key!r} is not a str"
    if reason:
        raise UserError(f"invalid key: {reason}; keys are relative posix paths like 'references/api.md'")


def _check_artifact_id(artifact_id: object) -> None:
    if not isinstance(artifact_id, str) or "/" in artifact_id or unsafe_key_reason(artifact_id):
        raise UserError(f"invalid artifact id {artifact_id!r}: use one folder name like 'prompt'")


def _check_state(state: object) -> None:
    if not isinstance(state, Mapping):
        raise UserError(f"artifact state must be a dict of {{key: text}}, got {type(state).__name__}")
    for key, text in state.items():
        _check_key(key)
        if not isinstance(text, str):
            raise UserError(f"value of key {key!r} must be str, got {type(text).__name__}")
    folders = {k.rsplit("/", i)[0] for k in state for i in range(1, k.count("/") + 1)}
    if clash := sorted(folders & state.keys()):
        raise UserError(f"key {clash[0]!r} is both a file and a folder; rename one of them")


def looks_like_ledger(path: pathlib.Path) -> bool:
    """A ledger is a bare git repository: HEAD, objects/ and refs/ at its top (read, not opened)."""
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def clear_stale_locks(path: pathlib.Path) -> list[str]:
    """Remove the `*.lock` files git leaves in a bare repository when it is killed mid-write
    (`HEAD.lock`, `refs/heads/dev.lock`, `packed-refs.lock`, ...); only for a caller that knows no
    git command runs there now. The paths removed, relative to `path`."""
    found = [*path.glob("*.lock"), *(path / "refs").rglob("*.lock")]
    removed = []
    for lock in found:
        try:
            if lock.is_file() and not lock.is_symlink():
                lock.unlink()
                removed.append(lock.relative_to(path).as_posix())
        except OSError:
            continue  # one that cannot go is named by the git command it fails
    return removed


def in_use(path: pathlib.Path) -> bool:
    """Whether a `Ledger` of some process has the ledger at `path` open now."""
    return filelock.held(path) is True


def _open_repo(path: pathlib.Path) -> git.Repo:
    """The ledger repository at `path`, created first when `path` is new or an empty folder."""
    if path.exists() and not path.is_dir():
        raise UserError(f"store={path} is a file, not a ledger; {_FIX}")
    blocking = reading.in_the_way(path)
    if blocking is not None:
        raise UserError(f"store={path} runs through {blocking}, a file, not a folder; {_FIX}")
    refused = [name for name in _REFUSED_VARIABLES if os.environ.get(name)]
    if refused:
        raise UserError(f"{' and '.join(refused)} {'is' if len(refused) == 1 else 'are'} set in this environment (a git "
                        "hook sets such variables for its own repository), and the ledger's objects or refs would go "
                        f"there: unset {'it' if len(refused) == 1 else 'them'} for the run (env -u {refused[0]} ...)")
    if not path.exists() or not any(path.iterdir()):
        _create_aside(path)
    try:
        return repository(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        if (path / "HEAD").is_file() or (path / "agentdescent").is_dir():  # a ledger once: what made it one is gone
            raise LedgerDamaged(path, "it is no git repository any more: its HEAD, objects/ or refs/ is gone") from None
        raise UserError(f"store={path} is a non-empty directory, not a git ledger; {_FIX}") from None


def _create_aside(path: pathlib.Path) -> None:
    """Build a whole ledger in a folder beside `path`, then rename it into place: a kill leaves
    either no ledger or a complete one, and of several processes creating one at once, the first
    rename wins and the others open it (a rename onto a folder that is no longer empty fails)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.creating-", dir=path.parent))
    except OSError as exc:  # a folder that cannot be written, a system folder (/proc): no ledger there
        raise UserError(f"store={path}: no ledger can be made there ({exc.strerror or exc}); {_FIX}") from None
    try:
        _git_init(aside)
        repo = repository(aside)
        try:
            _write_root(GitObjects(repo, aside), Refs(repo, aside))
        finally:
            repo.close()
        os.rename(aside, path)
    except OSError:
        if not (path.is_dir() and any(path.iterdir())):
            raise  # not another creator's win: a real failure
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _git_init(folder: pathlib.Path) -> None:
    """`git init --bare` in `folder`, with none of the variables that would point it at another
    repository (GitPython's `Repo.init` passes them on: inside a hook, it re-made the user's own
    repository a bare one). Not through `process.run_process`, which counts the user's programs."""
    env = {name: value for name, value in os.environ.items() if name not in _REPOSITORY_VARIABLES} | NO_HOOKS
    try:
        done = subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=dev", str(folder)], env=env,
                              capture_output=True, text=True, errors="replace", timeout=60, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise git.exc.GitCommandNotFound("git", "not on PATH") from None
    except subprocess.TimeoutExpired:
        raise LedgerError(f"git init did not finish in 60 s in {folder}") from None
    if done.returncode != 0:
        raise git_failure("git init", folder, done.stderr)


def _write_root(objects: GitObjects, refs: Refs) -> None:
    """Version 0, an empty commit, as `dev` and `stable`; each ref only where it is missing."""
    message = format_message("ledger created", {}, 0)
    root = objects.write(b"commit", commit_bytes(objects.write_tree({}), None, message))
    for ref in (DEV, STABLE):
        try:
            refs.update(ref, root, NULL_SHA)
        except LedgerError as refused:
            try:
                refs.read(ref)  # there already: another process wrote it first
            except LedgerError:
                raise refused from None


class Ledger:
    """A run's git ledger: artifact snapshots by version, CAS commits on `dev`, a `stable` ref.

    Safe to share between threads; other processes' commits show at the next call. Use it as a
    context manager, or call `close`, to stop GitPython's background git processes."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = pathlib.Path(path).absolute()
        self._lock = threading.Lock()
        try:
            repo = _open_repo(self.path)
        except git.exc.GitCommandNotFound:
            raise UserError("git is not on PATH, and the ledger is a git repository: install git (apt install git, "
                            "brew install git), then run again") from None
        self._repo = repo
        # held while open: `in_use` (and so `runs --prune`) sees it; opened by nobody else, git's
        # lock files a killed commit left are cleared first (each would fail every later commit)
        self._open = filelock.hold_shared(self.path, alone=lambda: clear_stale_locks(self.path))
        self._objects = GitObjects(repo, self.path)
        self._refs = Refs(repo, self.path)
        self._by_version: dict[int, bytes] = {}  # version -> commit sha on dev
        self._settle_refs()
        try:
            self.head()
        except LedgerDamaged:
            raise  # a ledger something else changed: it names what
        except (LedgerError, ValueError, KeyError) as exc:
            if not self._refs.stored(DEV) and self._refs.stored(STABLE):  # a ledger's `dev` was taken away
                raise LedgerDamaged(self.path, f"its ref {DEV} is missing", ref=DEV) from None
            raise UserError(f"store={self.path} is a git repository but not a ledger "
                            f"(refs/heads/dev is missing or unreadable: {exc}); {_FIX}") from None

    def __enter__(self) -> Ledger:
        return self

    def __del__(self) -> None:  # a ledger never closed (`result.ledger` read in passing) lets go of its folder
        fd = getattr(self, "_open", -1)
        if fd >= 0:
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop GitPython's background git processes (the ledger stays on disk)."""
        with self._lock:
            self._repo.close()
            if self._open >= 0:
                os.close(self._open)
                self._open = -1

    def head(self) -> int:
        """The current version of `dev` (re-read from disk, so other processes' commits show)."""
        with self._lock:
            return self._objects.commit(self._refs.read(DEV)).version

    def stable(self) -> int:
        """The version `stable` points at."""
        with self._lock:
            return self._objects.commit(self._refs.read(STABLE)).version

    def sha(self, version: int) -> str:
        """The hex commit sha of `version` on `dev`."""
        with self._lock:
            return self._at(version).hex()

    def has_artifact(self, artifact_id: str, version: int | None = None) -> bool:
        """Whether `artifacts/<artifact_id>/` exists at `version` (None = head)."""
        _check_artifact_id(artifact_id)
        with self._lock:
            return self._artifact_tree(self._at(version), artifact_id) is not None

    def snapshot(self, artifact_id: str, version: int | None = None) -> dict[str, str]:
        """The artifact's {key: text} at `version` (None = head)."""
        _check_artifact_id(artifact_id)
        with self._lock:
            tree = self._artifact_tree(self._at(version), artifact_id)
            if tree is None:
                where = "head" if version is None else f"version {version}"
                raise UserError(f"artifact {artifact_id!r} is not in the ledger at {where}; "
                                "commit it first")
            return dict(self._objects.snapshot(tree))

    def log(self, limit: int | None = None) -> list[CommitRecord]:
        """`dev`'s first-parent history, newest first."""
        with self._lock:
            out: list[CommitRecord] = []
            sha: bytes | None = self._refs.read(DEV)
            while sha is not None and (limit is None or len(out) < limit):
                c = self._objects.commit(sha)
                out.append(CommitRecord(version=c.version, sha=sha.hex(), message=c.subject,
                                        trailers=dict(c.trailers)))
                sha = c.parent
            return out

    def commit(self, artifact_id: str, state: dict[str, str], *, expected_version: int,
               message: str, trailers: dict[str, str] | None = None) -> int:
        """Commit `state` as the artifact's new content on top of `expected_version`; CAS on `dev`."""
        _check_artifact_id(artifact_id)
        _check_state(state)
        text = format_message(message or f"update {artifact_id}", trailers or {}, expected_version + 1)
        with self._lock:
            parent = self._refs.read(DEV)
            actual = self._objects.commit(parent).version
            if actual != expected_version:
                raise HeadMoved(expected_version, actual)
            data = commit_bytes(self._write_root(parent, artifact_id, dict(state)), parent, text)
            new = self._objects.write(b"commit", data)
            self._objects.remember_commit(new, parse_commit(data))
            self._cas(new, parent, expected_version)
            if (expected_version + 1) % PACK_EVERY == 0:
                self._objects.pack()
        return expected_version + 1

    def promote(self, version: int) -> bool:
        """Point `stable` at `dev`'s commit for `version`, by compare-and-swap, only forward: False
        (and nothing moves) when `stable` is already at `version` or past it, as another run on this
        store may have moved it."""
        with self._lock:
            new = self._at(version)
            while True:
                old = self._refs.read(STABLE)
                if self._objects.commit(old).version >= version:
                    return False
                try:
                    self._refs.update(STABLE, new, old)
                    return True
                except LedgerError:
                    if self._refs.read(STABLE) == old:
                        raise  # it did not move under us: a real failure

    # callers hold the lock

    def _at(self, version: int | None) -> bytes:
        """The commit sha of `version` on dev (None = head)."""
        if isinstance(version, int) and not isinstance(version, bool) and version in self._by_version:
            return self._by_version[version]  # dev's history only grows: a version, once seen, stays
        head = self._refs.read(DEV)
        if version is None:
            return head
        top = self._objects.commit(head).version
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= top:
            raise UserError(f"unknown version {version!r}: the ledger at {self.path} "
                            f"has versions 0..{top}")
        sha: bytes | None = head  # index the append-only history down to the first known commit
        found: dict[int, bytes] = {}
        while sha is not None and self._by_version.get(self._objects.commit(sha).version) != sha:
            info = self._objects.commit(sha)
            found[info.version] = sha
            sha = info.parent
        self._by_version.update(found)  # all at once: a walk cut short (Ctrl-C) leaves no gap below it
        return self._by_version[version]

    def _artifact_tree(self, commit: bytes, artifact_id: str) -> bytes | None:
        root = self._objects.tree(self._objects.commit(commit).tree)
        if ARTIFACTS not in root:
            return None
        mode, sha = self._objects.tree(root[ARTIFACTS][1]).get(artifact_id, (0, b""))
        return sha if mode >> 12 == 4 else None

    def _write_root(self, parent: bytes, artifact_id: str, state: dict[str, str]) -> bytes:
        """The parent's root tree with artifacts/<artifact_id>/ replaced by `state`."""
        root = dict(self._objects.tree(self._objects.commit(parent).tree))
        arts = dict(self._objects.tree(root[ARTIFACTS][1])) if ARTIFACTS in root else {}
        arts[artifact_id] = (TREE_MODE, self._objects.write_snapshot(state))
        root[ARTIFACTS] = (TREE_MODE, self._objects.write_tree(arts))
        return self._objects.write_tree(root)

    def _cas(self, new: bytes, old: bytes, expected: int) -> None:
        """Move dev from `old` to `new` atomically, or raise HeadMoved."""
        try:
            self._refs.update(DEV, new, old)
        except LedgerError:
            actual = self._objects.commit(self._refs.read(DEV)).version
            if actual != expected:
                raise HeadMoved(expected, actual) from None
            raise

    def _settle_refs(self) -> None:
        """Give a repository whose refs a kill left missing the ones it lacks: a bare repository
        with no ref at all (an older version's creation cut short) becomes an empty ledger, and a
        missing `stable` points at version 0."""
        try:
            self._refs.read(DEV)
        except LedgerError:
            if any(True for _ in self._repo.references):
                return  # refs of something else: not ours to touch; opening says so
            _write_root(self._objects, self._refs)
            return
        try:
            self._refs.read(STABLE)
        except LedgerDamaged:
            raise
        except LedgerError:
            self._refs.update(STABLE, self._at(0), NULL_SHA)
