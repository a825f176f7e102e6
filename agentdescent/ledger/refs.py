"""The ledger's two refs, `dev` and `stable`: read from disk every time, moved by `git update-ref`.

`update-ref` with an old value is git's own compare-and-swap under its ref lock, so writers in
other threads or processes never lose an update: the one that loses gets a `LedgerError`. It is
the only subprocess a commit costs. Left out: what the commits they point at mean (versions).
"""

from __future__ import annotations

import os
import pathlib
import shutil

import git

from agentdescent.errors import LedgerDamaged, LedgerError
from agentdescent.quoting import quoted

DEV, STABLE = "refs/heads/dev", "refs/heads/stable"
NULL_SHA = b"\0" * 20  # as the old value: the ref must not exist yet
LOW_SPACE = 1 << 20  # bytes free below which a failed write is put down to a full disk


def git_failure(what: str, path: pathlib.Path, stderr: str) -> LedgerError:
    """A git command's failure in the ledger at `path`: its stderr as one bounded quote (a run's
    status line holds it), and a full disk named as such (git says only "couldn't write")."""
    try:
        free = shutil.disk_usage(path if path.exists() else path.parent).free
    except OSError:
        free = None
    full = f"; the disk holding it has {free // 1024} KB free: free some space, then resume" \
        if free is not None and free < LOW_SPACE else ""
    return LedgerError(f"{what} failed in {path}: {quoted(stderr.strip()[-500:], 500)}{full}")


class Refs:
    def __init__(self, repo: git.Repo, path: pathlib.Path) -> None:
        self._repo = repo
        self._path = path

    def read(self, ref: str) -> bytes:
        """The binary sha `ref` points at now: its loose file in the bare repository, which
        `update-ref` replaces by a rename (so a read sees the old sha or the new, whole), else
        GitPython's lookup (a packed or symbolic ref). The file read is a tenth of the lookup,
        which resolves the path and validates it first, and every step reads `dev`."""
        try:
            loose = (self._path / ref).read_bytes().strip()
        except OSError:
            loose = b""
        if len(loose) == 40:
            try:
                return bytes.fromhex(loose.decode("ascii"))
            except ValueError:
                pass  # not a sha (a symbolic ref): GitPython resolves it
        try:
            return bytes.fromhex(git.SymbolicReference.dereference_recursive(self._repo, ref))
        except (ValueError, AssertionError) as exc:  # AssertionError: GitPython's answer to an empty ref file
            said = str(exc) or "the file is empty"
            if self.stored(ref):
                raise LedgerDamaged(self._path, f"its ref {ref} names no commit: {quoted(said, 200)}", ref=ref) from None
            raise LedgerError(f"cannot read {ref} in {self._path}: {said}") from None

    def stored(self, ref: str) -> bool:
        """Whether the repository holds `ref`, loose or packed, whatever it says."""
        if os.path.lexists(self._path / ref):
            return True
        try:
            packed = (self._path / "packed-refs").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return any(line.split(" ")[-1] == ref for line in packed.splitlines() if not line.startswith(("#", "^")))

    def update(self, ref: str, new: bytes, old: bytes | None = None) -> None:
        """Point `ref` at `new`; with `old`, only if it points at `old` now (NULL_SHA: if it does not exist)."""
        args = [ref, new.hex()] + ([] if old is None else [old.hex()])
        try:
            self._repo.git.update_ref(*args)
        except git.GitCommandError as exc:
            raise git_failure("git update-ref", self._path, str(exc.stderr)) from None
