"""The ledger repository's objects: written in-process as loose objects and read back from them,
with GitPython's persistent `git cat-file` for the rest (objects a `git gc` packed).

Git objects are named by their content and never change, so whatever was read once is kept in a
memo, keyed by what was read (a commit, a tree, the files under a tree, a text) and its sha. What
is kept of a whole version (its trees, its files, its texts together) is as large as the version,
so only the `VERSIONS_KEPT` used last are: kept for every version of a long run they would grow
with the square of its commits. Commits and texts are each kept once, for good. New objects are
written as loose objects through gitdb, skipping any already known to exist, and `pack` puts them
in a pack now and then: loose, each is stored whole in a file of its own (a text that grows a line a
commit, again at every commit), so a long run's ledger would grow with the square of its commits.

Not thread-safe: the `Ledger` serialises every call. Left out: refs, versions and any working tree.
"""

from __future__ import annotations

import hashlib
import io
import pathlib
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import git
from git.objects.fun import tree_entries_from_data
from gitdb import IStream
from gitdb.db.loose import LooseObjectDB
from gitdb.exc import BadObject

from agentdescent.errors import LedgerDamaged, LedgerError
from agentdescent.ledger.gitobjects import BLOB_MODE, TREE_MODE, CommitInfo, nest, parse_commit, tree_bytes

T = TypeVar("T")
PACK_EVERY = 100  # versions between two packings: each costs a walk of the history, and packs the objects of these
_STORE_TRIES = 3  # a loose object's write, when the folder it goes in vanishes under it
VERSIONS_KEPT = 64  # of the whole-version entries (a tree, its files, its snapshot), those used last
WHOLE = ("tree", "files", "snapshot")
Entries = dict[str, tuple[int, bytes]]  # a tree: name -> (mode, binsha)


class GitObjects:
    def __init__(self, repo: git.Repo, path: pathlib.Path) -> None:
        self._repo = repo
        self._path = path
        self._loose = LooseObjectDB(repo.odb.root_path())
        self._known: set[bytes] = set()  # shas of objects known to be in the repository
        self._memo: dict[tuple[str, bytes], Any] = {}  # commits and texts
        self._recent: OrderedDict[tuple[str, bytes], Any] = OrderedDict()  # whole-version entries, the last used last

    # -- reading

    def commit(self, sha: bytes) -> CommitInfo:
        return self._memoised("commit", sha, self._parse_commit)

    def tree(self, sha: bytes) -> Entries:
        return self._memoised("tree", sha, self._parse_tree)

    def files(self, tree: bytes) -> dict[str, bytes]:
        """{path: blob sha} of every file under `tree`, recursively."""
        return self._memoised("files", tree, self._list_files)

    def text(self, blob: bytes) -> str:
        return self._memoised("text", blob, self._decode)

    def snapshot(self, tree: bytes) -> dict[str, str]:
        """{path: text} under `tree`. The memo's own dict: callers copy it before handing it out."""
        return self._memoised("snapshot", tree, lambda t: {k: self.text(b) for k, b in self.files(t).items()})

    # -- writing

    def write(self, kind: bytes, data: bytes) -> bytes:
        """Store one object (a no-op when it is known to exist) and return its binary sha."""
        binsha = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()
        if binsha not in self._known:
            for attempt in range(_STORE_TRIES):
                try:
                    self._loose.store(IStream(kind, len(data), io.BytesIO(data)))
                    break
                except FileNotFoundError:  # a repack of another process removed the folder gitdb just made
                    if attempt == _STORE_TRIES - 1:
                        raise
            self._known.add(binsha)
        return binsha

    def pack(self) -> None:
        """Put the loose objects a ref reaches into a pack, each a delta of another where it can be
        (`git repack -d`), and fold the packs into one once they are many (`git gc --auto`, run to its
        end, no process left behind). What a commit in progress wrote stays loose, as no ref reaches
        it yet. Git's own order of writes keeps a repack that another writer runs beside, or that is
        killed, safe: a pack is whole, index and all, before the loose copies go (a killed one leaves
        only temp files), and `gc` takes its lock. A failure (a full disk) leaves the objects loose."""
        try:
            self._repo.git.repack("-d", "-q")
            self._repo.git(c="gc.autoDetach=false").gc("--auto", "--quiet")
        except git.GitCommandError:
            pass  # loose objects are as good to read: the next packing tries again
        self._loose = LooseObjectDB(self._repo.odb.root_path())  # its memo of paths names files just removed

    def remember_commit(self, sha: bytes, info: CommitInfo) -> None:
        """A commit this process just wrote: no need to read it back."""
        self._memo[("commit", sha)] = info

    def write_tree(self, entries: Mapping[str, tuple[int, bytes]]) -> bytes:
        return self.write(b"tree", tree_bytes(entries))

    def write_snapshot(self, state: Mapping[str, str]) -> bytes:
        """The tree of `state` ({path: text}) with its blobs and subtrees, remembered as read."""
        blobs = {key: self.write(b"blob", text.encode("utf-8")) for key, text in state.items()}
        tree = self._write_folder(nest(blobs))
        self._keep(("files", tree), blobs)
        self._keep(("snapshot", tree), dict(state))
        return tree

    def _write_folder(self, folder: dict) -> bytes:
        return self.write_tree({
            name: (TREE_MODE, self._write_folder(node)) if isinstance(node, dict) else (BLOB_MODE, node)
            for name, node in folder.items()
        })

    # -- the memo and the parsers behind it

    def _memoised(self, what: str, sha: bytes, compute: Callable[[bytes], T]) -> T:
        key = (what, sha)
        if what not in WHOLE:
            if key not in self._memo:
                self._memo[key] = compute(sha)
            return self._memo[key]
        if key in self._recent:
            self._recent.move_to_end(key)
            return self._recent[key]
        return self._keep(key, compute(sha))

    def _keep(self, key: tuple[str, bytes], value: T) -> T:
        self._recent[key] = value
        self._recent.move_to_end(key)
        while len(self._recent) > VERSIONS_KEPT * len(WHOLE):
            self._recent.popitem(last=False)
        return value

    def _read(self, binsha: bytes, kind: bytes) -> bytes:
        loose = self._loose.has_object(binsha)  # what a ledger writes: read here, with no pipe to share
        try:
            if loose:
                try:
                    stream = self._loose.stream(binsha)
                except BadObject:  # packed since (by another process's `pack`): read from the pack
                    loose, stream = False, self._repo.odb.stream(binsha)
            else:
                stream = self._repo.odb.stream(binsha)
            data = stream.read()
        except BaseException as exc:
            if not loose:
                # a read cut short (Ctrl-C lands here too) leaves the rest of its answer in the pipe
                # of the persistent `git cat-file`, and the next read would take that for its own
                # answer or wait for one that never comes: the next read starts a fresh cat-file
                self._repo.git.clear_cache()
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, (ValueError, BadObject, zlib.error)):  # cat-file's "missing"; a garbled loose file
                said = "garbled" if isinstance(exc, zlib.error) else "missing"
                raise LedgerDamaged(self._path, f"its object {binsha.hex()} is {said}") from None
            raise LedgerError(f"cannot read object {binsha.hex()} in {self._path}: {exc}") from None  # git itself failed
        if stream.type != kind:
            raise LedgerError(f"object {binsha.hex()} in {self._path} is a {stream.type.decode()}, "
                              f"expected a {kind.decode()}")
        self._known.add(binsha)
        return data

    def _parse_commit(self, sha: bytes) -> CommitInfo:
        try:
            return parse_commit(self._read(sha, b"commit"))
        except (KeyError, ValueError) as exc:
            raise LedgerError(f"{sha.hex()} in {self._path} is not a ledger commit: {exc}") from None

    def _parse_tree(self, sha: bytes) -> Entries:
        entries = tree_entries_from_data(self._read(sha, b"tree"))
        self._known.update(e[0] for e in entries)
        return {name: (mode, binsha) for binsha, mode, name in entries}

    def _list_files(self, tree: bytes) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for name, (mode, sha) in self.tree(tree).items():
            if mode >> 12 == 4:
                out.update({f"{name}/{k}": b for k, b in self.files(sha).items()})
            else:
                out[name] = sha
        return out

    def _decode(self, blob: bytes) -> str:
        try:
            return self._read(blob, b"blob").decode("utf-8")
        except UnicodeDecodeError:
            raise LedgerError(f"blob {blob.hex()} in {self._path} is not utf-8 text") from None
