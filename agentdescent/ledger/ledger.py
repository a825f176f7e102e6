"""The git-backed Ledger: one real git repository per run, one commit per optimizer step.

The repository is bare (nothing is ever checked out). Each artifact is a folder
`artifacts/<artifact_id>/` in the commit tree, one file per key, so `git log -p dev` shows every
step as an ordinary diff. Versions are integers (root = 0, each commit = parent + 1) stored as a
`Version: N` trailer. `dev` moves only by compare-and-swap (`git update-ref dev <new> <old>`), so
concurrent writers in threads or processes never lose a commit: the loser gets `HeadMoved`.
`stable` is moved by `promote`.

Objects are written in-process (loose objects through gitdb) and read through GitPython's
persistent `git cat-file`; the CAS is the only subprocess per commit.

Left out: merging, rebasing and retry policy (the aggregator's job), strategies and rendering,
garbage collection, remotes, and any working tree.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import git
from git.objects.fun import tree_entries_from_data
from gitdb import IStream
from gitdb.db.loose import LooseObjectDB

from agentdescent.errors import HeadMoved, LedgerError, UserError
from agentdescent.governance import unsafe_key_reason
from agentdescent.ledger.gitobjects import (
    BLOB_MODE,
    TREE_MODE,
    CommitInfo,
    commit_bytes,
    format_message,
    nest,
    parse_commit,
    tree_bytes,
)

__all__ = ["CommitRecord", "Ledger"]

DEV, STABLE, ARTIFACTS = "refs/heads/dev", "refs/heads/stable", "artifacts"
_NULL_SHA = "0" * 40
_FIX = "choose an empty or new directory for store="


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


def _open_repo(path: pathlib.Path) -> tuple[git.Repo, bool]:
    """Return (repo, created): create a ledger repo at a new or empty path, else open it."""
    if path.exists() and not path.is_dir():
        raise UserError(f"store={path} is a file, not a ledger; {_FIX}")
    if not path.exists() or not any(path.iterdir()):
        return git.Repo.init(path, bare=True, initial_branch="dev"), True
    try:
        return git.Repo(path), False
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(f"store={path} is a non-empty directory, not a git ledger; {_FIX}") from None


class Ledger:
    """A run's git ledger: artifact snapshots by version, CAS commits on `dev`, a `stable` ref."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = pathlib.Path(path).absolute()
        self._lock = threading.Lock()
        self._repo, created = _open_repo(self.path)
        self._loose = LooseObjectDB(self._repo.odb.root_path())
        self._known: set[bytes] = set()  # object shas known to exist
        self._commits: dict[bytes, CommitInfo] = {}
        self._trees: dict[bytes, dict[str, tuple[int, bytes]]] = {}
        self._blob_maps: dict[bytes, dict[str, bytes]] = {}
        self._texts: dict[bytes, str] = {}
        self._snapshots: dict[bytes, dict[str, str]] = {}
        self._by_version: dict[int, bytes] = {}
        self._vvs: dict[tuple[str, int], dict[str, int]] = {}
        if created:
            self._create_root()
        try:
            self.head()
        except (LedgerError, ValueError, KeyError) as exc:
            raise UserError(f"store={self.path} is a git repository but not a ledger "
                            f"(refs/heads/dev is missing or unreadable: {exc}); {_FIX}") from None

    def close(self) -> None:
        """Stop GitPython's background git processes (the ledger stays on disk)."""
        with self._lock:
            self._repo.close()

    def head(self) -> int:
        """The current version of `dev` (re-read from disk, so other processes' commits show)."""
        with self._lock:
            return self._info(self._ref(DEV)).version

    def stable(self) -> int:
        """The version `stable` points at."""
        with self._lock:
            return self._info(self._ref(STABLE)).version

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
            if tree not in self._snapshots:
                self._snapshots[tree] = {k: self._text(b) for k, b in self._blobs(tree).items()}
            return dict(self._snapshots[tree])

    def changed_keys(self, artifact_id: str, since: int, until: int | None = None) -> set[str]:
        """Keys added, removed or changed between versions `since` and `until` (None = head)."""
        _check_artifact_id(artifact_id)
        with self._lock:
            old, new = self._blobs_at(artifact_id, since), self._blobs_at(artifact_id, until)
        return {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}

    def version_vector(self, artifact_id: str, version: int | None = None) -> dict[str, int]:
        """For each key at `version`, the version at which its current text was last written."""
        _check_artifact_id(artifact_id)
        with self._lock:
            target = self._info(self._at(version)).version
            start = target
            while start > 0 and (artifact_id, start) not in self._vvs:
                start -= 1
            vv, prev = self._vvs.get((artifact_id, start), {}), self._blobs_at(artifact_id, start)
            for v in range(start + 1, target + 1):
                cur = self._blobs_at(artifact_id, v)
                vv = {k: vv.get(k, v) if prev.get(k) == b else v for k, b in cur.items()}
                self._vvs[(artifact_id, v)], prev = vv, cur
            return dict(vv)

    def log(self, limit: int | None = None) -> list[CommitRecord]:
        """`dev`'s first-parent history, newest first."""
        with self._lock:
            out, sha = [], self._ref(DEV)
            while sha is not None and (limit is None or len(out) < limit):
                c = self._info(sha)
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
            parent = self._ref(DEV)
            actual = self._info(parent).version
            if actual != expected_version:
                raise HeadMoved(expected_version, actual)
            tree = self._write_root(parent, artifact_id, dict(state))
            data = commit_bytes(tree, parent, text)
            new = self._store(b"commit", data)
            self._commits[new] = parse_commit(data)
            self._cas(new, parent, expected_version)
        return expected_version + 1

    def promote(self, version: int) -> None:
        """Point `stable` at `dev`'s commit for `version`."""
        with self._lock:
            self._git("update_ref", STABLE, self._at(version).hex())

    # reading objects: callers hold the lock

    def _ref(self, ref: str) -> bytes:
        try:
            return bytes.fromhex(git.SymbolicReference.dereference_recursive(self._repo, ref))
        except ValueError as exc:
            raise LedgerError(f"cannot read {ref} in {self.path}: {exc}") from None

    def _read(self, binsha: bytes, kind: bytes) -> bytes:
        try:
            stream = self._repo.odb.stream(binsha)
            data = stream.read()
        except Exception as exc:  # BadObject, GitCommandError, ValueError from cat-file
            raise LedgerError(f"cannot read object {binsha.hex()} in {self.path}: {exc}") from None
        if stream.type != kind:
            raise LedgerError(f"object {binsha.hex()} in {self.path} is a {stream.type.decode()}, "
                              f"expected a {kind.decode()}")
        self._known.add(binsha)
        return data

    def _info(self, sha: bytes) -> CommitInfo:
        if sha not in self._commits:
            try:
                self._commits[sha] = parse_commit(self._read(sha, b"commit"))
            except (KeyError, ValueError) as exc:
                raise LedgerError(f"{sha.hex()} in {self.path} is not a ledger commit: {exc}") from None
        return self._commits[sha]

    def _tree(self, binsha: bytes) -> dict[str, tuple[int, bytes]]:
        if binsha not in self._trees:
            entries = tree_entries_from_data(self._read(binsha, b"tree"))
            self._known.update(e[0] for e in entries)
            self._trees[binsha] = {name: (mode, sha) for sha, mode, name in entries}
        return self._trees[binsha]

    def _blobs(self, tree: bytes) -> dict[str, bytes]:
        """{key: blob sha} of every file under `tree`, recursively."""
        if tree not in self._blob_maps:
            out: dict[str, bytes] = {}
            for name, (mode, sha) in self._tree(tree).items():
                if mode >> 12 == 4:
                    out.update({f"{name}/{k}": b for k, b in self._blobs(sha).items()})
                else:
                    out[name] = sha
            self._blob_maps[tree] = out
        return self._blob_maps[tree]

    def _text(self, blob: bytes) -> str:
        if blob not in self._texts:
            try:
                self._texts[blob] = self._read(blob, b"blob").decode("utf-8")
            except UnicodeDecodeError:
                raise LedgerError(f"blob {blob.hex()} in {self.path} is not utf-8 text") from None
        return self._texts[blob]

    def _at(self, version: int | None) -> bytes:
        """The commit sha of `version` on dev (None = head)."""
        head = self._ref(DEV)
        if version is None:
            return head
        top = self._info(head).version
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= top:
            raise UserError(f"unknown version {version!r}: the ledger at {self.path} "
                            f"has versions 0..{top}")
        sha: bytes | None = head  # index the append-only history down to the first known commit
        while sha is not None and self._by_version.get(self._info(sha).version) != sha:
            self._by_version[self._info(sha).version] = sha
            sha = self._info(sha).parent
        return self._by_version[version]

    def _artifact_tree(self, commit: bytes, artifact_id: str) -> bytes | None:
        root = self._tree(self._info(commit).tree)
        if ARTIFACTS not in root:
            return None
        mode, sha = self._tree(root[ARTIFACTS][1]).get(artifact_id, (0, b""))
        return sha if mode >> 12 == 4 else None

    def _blobs_at(self, artifact_id: str, version: int | None) -> dict[str, bytes]:
        tree = self._artifact_tree(self._at(version), artifact_id)
        return {} if tree is None else self._blobs(tree)

    # writing objects: callers hold the lock

    def _store(self, kind: bytes, data: bytes) -> bytes:
        binsha = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()
        if binsha not in self._known:
            self._loose.store(IStream(kind, len(data), io.BytesIO(data)))
            self._known.add(binsha)
        return binsha

    def _write_folder(self, folder: dict) -> bytes:
        entries = {
            name: (TREE_MODE, self._write_folder(node)) if isinstance(node, dict)
            else (BLOB_MODE, node) for name, node in folder.items()
        }
        return self._store(b"tree", tree_bytes(entries))

    def _write_root(self, parent: bytes, artifact_id: str, state: dict[str, str]) -> bytes:
        """The parent's root tree with artifacts/<artifact_id>/ replaced by `state`."""
        blobs = {key: self._store(b"blob", text.encode("utf-8")) for key, text in state.items()}
        art_tree = self._write_folder(nest(blobs))
        self._blob_maps.setdefault(art_tree, blobs)
        self._snapshots.setdefault(art_tree, state)
        root = dict(self._tree(self._info(parent).tree))
        arts = dict(self._tree(root[ARTIFACTS][1])) if ARTIFACTS in root else {}
        arts[artifact_id] = (TREE_MODE, art_tree)
        root[ARTIFACTS] = (TREE_MODE, self._store(b"tree", tree_bytes(arts)))
        return self._store(b"tree", tree_bytes(root))

    def _cas(self, new: bytes, old: bytes, expected: int) -> None:
        """Move dev from `old` to `new` atomically, or raise HeadMoved."""
        try:
            self._git("update_ref", DEV, new.hex(), old.hex())
        except LedgerError:
            actual = self._info(self._ref(DEV)).version
            if actual != expected:
                raise HeadMoved(expected, actual) from None
            raise

    def _create_root(self) -> None:
        message = format_message("ledger created", {}, 0)
        root = self._store(b"commit", commit_bytes(self._store(b"tree", b""), None, message))
        try:
            self._git("update_ref", DEV, root.hex(), _NULL_SHA)
        except LedgerError:
            return  # another process created the ledger first: use theirs
        self._git("update_ref", STABLE, root.hex(), _NULL_SHA)

    def _git(self, command: str, *args: str) -> None:
        try:
            getattr(self._repo.git, command)(*args)
        except git.GitCommandError as exc:
            name = command.replace("_", "-")
            raise LedgerError(f"git {name} failed in {self.path}: {exc.stderr.strip()}") from None
