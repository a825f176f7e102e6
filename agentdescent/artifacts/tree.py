"""Reading a folder (a Claude Code skill, a set of agent definitions) into `{relative posix path: text}`.

`load_tree` walks the folder without following anything, leaves out version-control, cache and
build folders and OS or editor litter, keeps what `include` / `exclude` select, and returns each
file's text exactly as on disk (line endings too), keyed by relative posix path in sorted order.
A file it cannot hold as text (binary, not UTF-8, too big, a symlink, a FIFO, an unsafe name) is
refused with a `UserError` that names it and the fix, or skipped and listed when asked.

What it leaves out: writing a tree back (`EvolveResult.write_to`), running an agent in one,
`.gitignore` rules (pass `exclude=`), and any decoding but strict UTF-8.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentdescent import atomic, reading
from agentdescent.errors import UserError
from agentdescent.governance import MAX_FILE_BYTES, clashes, unsafe_key_reason

SKIPPED_FOLDERS = (
    ".git", ".hg", ".svn", ".bzr",                                  # version control
    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", "node_modules",
    ".venv", "venv", "build", "dist", "*.egg-info",                 # caches, environments, builds
    "*.bak-[0-9]*",                                                 # write_to's backups
)
SKIPPED_FILES = (
    ".git", ".gitmodules", ".gitattributes",                        # git's own files (never keys)
    ".DS_Store", "Thumbs.db", "*.pyc",                              # OS and interpreter litter
    "*.swp", "*.swo", "*~", ".#*",                                  # editor swap, backup and lock files
    "*.bak-[0-9]*", ".*.tmp", ".*.lock",                            # write_to's backups, temp files, locks
)
NEEDED_NAMES = ("SKILL.md", ".claude-plugin/plugin.json")  # spelt so for a host to load the folder: kept of a clashing pair
_FOLDER_NAME = re.compile("|".join(fnmatch.translate(p) for p in SKIPPED_FOLDERS))
_FILE_NAME = re.compile("|".join(fnmatch.translate(p) for p in SKIPPED_FILES))
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def load_tree(
    path: str | os.PathLike,
    *,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    on_unreadable: Literal["error", "skip"] = "error",
    skipped: list[tuple[str, str]] | None = None,
    binary: dict[str, bytes] | None = None,
    executable: set[str] | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_files: int = 2_000,
    max_total_bytes: int = 20_000_000,
) -> dict[str, str]:
    """The text files under the folder `path`, as `{relative posix path: text}` in sorted key order.

    load_tree("my-skill") == {"SKILL.md": "---\\nname: ...", "references/api.md": "..."}

    - Always left out, at any depth: folders named as in `SKIPPED_FOLDERS` (.git, .hg, .svn, .bzr,
      __pycache__, .pytest_cache, .mypy_cache, .ruff_cache, .tox, node_modules, .venv, venv,
      build, dist, *.egg-info, write_to's *.bak-<n> backups) and files named as in
      `SKIPPED_FILES` (.git, .gitmodules, .gitattributes, .DS_Store, Thumbs.db, *.pyc, *.swp,
      *.swo, *~, .#*, and write_to's *.bak-<n>, .*.tmp and .*.lock). A symlink with a skipped
      folder's name (a linked .venv) is left out too.
    - `include` / `exclude`: glob patterns matched by `fnmatch.fnmatchcase` against the relative
      posix path, where `*` also crosses "/": the pattern language of `FileTree(frozen=...)`,
      without the case folding governance adds against evasion, so a name matches as spelled.
      `exclude` wins and applies to every entry: a matching folder is not walked, and a matching
      symlink, FIFO or binary file is silently left out. `include` picks among the regular files
      (None: all of them); a symlink or a special file is refused whatever `include` says.
    - Refused: a symlink (to a file or a folder, inside or outside; never followed), a FIFO,
      socket or device, a file with a NUL byte or that is not valid UTF-8, a file or folder whose
      relative path `governance.unsafe_key_reason` refuses, the later of two files that
      `governance.clashes` finds (`SKILL.md` and `skill.md`: one file on macOS; the stray, beside a
      name a host needs spelt so, `NEEDED_NAMES`: `SKILL.md`, `.claude-plugin/plugin.json`), a folder that
      cannot be listed, a file that cannot be read, a file over `max_file_bytes`, the files past
      `max_files`, and the bytes past `max_total_bytes` (sizes are checked before any is read).
    - `on_unreadable="error"` (default): the first refusal raises a `UserError` naming the file
      (or, for `max_files` / `max_total_bytes`, the folder), the limit or cause, and the fix.
      `on_unreadable="skip"`: refused entries are left out, and appended to `skipped` (when a
      list is passed) as `(relative posix path, reason)` in path order. Past a count or total
      limit, the files loaded are the first in key order and all later ones are skipped.
    - `binary`: a dict that receives the files that are not text (a NUL byte, not UTF-8), by key,
      as their bytes, rather than refusing them: an image or a template a skill ships, which a run
      carries into each rollout as it is and never changes (the limits count them too).
    - `executable`: a set that receives the keys of the files loaded (text or binary) that have an
      execute bit, for `tree_runner(executable=...)` to stage them so: a skill's `./scripts/x.sh`
      runs in a rollout as it does once written back.
    - Raises `UserError` when `path` is missing, is not a folder or cannot be listed, whatever
      `on_unreadable` says, and for a bad argument.

    The defaults (1 MB a file, 2,000 files, 20 MB in all) are far above any skill folder; the
    first is `MAX_FILE_BYTES`, the most a change may make one file hold, so that every file a
    run reads can be changed: a larger `max_file_bytes` reads files a run may not change.
    """
    root = _checked_root(path)
    walk = _Walk(root=root, include=_patterns("include", include), exclude=_patterns("exclude", exclude) or (),
                 skip=_skip_mode(on_unreadable), max_file_bytes=_limit("max_file_bytes", max_file_bytes),
                 max_files=_limit("max_files", max_files), max_total_bytes=_limit("max_total_bytes", max_total_bytes),
                 binary=binary, executable=executable)
    if skipped is not None and not isinstance(skipped, list):
        raise UserError(f"skipped must be a list that receives (path, reason) pairs, not {type(skipped).__name__}")
    if binary is not None and not isinstance(binary, dict):
        raise UserError(f"binary must be a dict that receives {{path: bytes}}, not {type(binary).__name__}")
    if executable is not None and not isinstance(executable, set):
        raise UserError(f"executable must be a set that receives paths, not {type(executable).__name__}")
    tree = walk.read(walk.files())
    if skipped is not None:
        skipped.extend(sorted(walk.refused))
    return tree


def left_out(key: str, exclude: Sequence[str] = ()) -> bool:
    """Whether `load_tree(..., exclude=exclude)` leaves out the file at `key` (a relative posix
    path): a folder on its way is one it always skips, or its name is, or an `exclude` glob names
    it or a folder on its way; names matched as `load_tree` matches them, case and all.

    left_out("build/x.js") is True;  left_out("Build/steps.md") is False;  left_out("notes/a.md", ["notes/*"]) is True
    """
    parts = key.split("/")
    folders = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
    if any(_FOLDER_NAME.match(part) for part in parts[:-1]) or _FILE_NAME.match(parts[-1]):
        return True
    return any(_matches(path, exclude) for path in (*folders, key))


def _checked_root(path: str | os.PathLike) -> Path:
    root = Path(path)
    if not root.exists():
        raise UserError(f"no folder at {str(root)!r}; pass the path of the skill or agents folder to load")
    if not root.is_dir():
        raise UserError(f"{str(root)!r} is a file, not a folder; pass the folder that holds it "
                        f"({str(root.parent)!r}) with include=[{root.name!r}], or read the file itself")
    return root


def _patterns(name: str, patterns: Sequence[str] | None) -> tuple[str, ...] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
        raise UserError(f"{name} must be a list of glob patterns, e.g. {name}=['*.md'], not {patterns!r}")
    return tuple(patterns)


def _skip_mode(on_unreadable: str) -> bool:
    if on_unreadable not in ("error", "skip"):
        raise UserError(f"on_unreadable must be 'error' or 'skip', not {on_unreadable!r}")
    return on_unreadable == "skip"


def _limit(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive whole number, not {value!r}")
    return value


def _matches(key: str, patterns: Sequence[str]) -> bool:
    """_matches("references/api.md", ["*.md"]) is True: `*` crosses "/", as in governance.is_frozen."""
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


@dataclass(kw_only=True)
class _Walk:
    """One load: the options, and the entries refused so far (raised at once unless `skip`)."""

    root: Path
    include: tuple[str, ...] | None
    exclude: tuple[str, ...]
    skip: bool
    max_file_bytes: int
    max_files: int
    max_total_bytes: int
    binary: dict[str, bytes] | None = None  # receives the files that are not text, where given
    executable: set[str] | None = None  # receives the keys of the files read that have an execute bit, where given
    refused: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.real = Path(os.path.realpath(self.root))  # the folder named may be a link; nothing below it is followed

    def refuse(self, key: str, reason: str, fix: str) -> None:
        if self.executable is not None:
            self.executable.discard(key)
        if not self.skip:
            raise UserError(f"cannot load {str(self.root / key)!r}: {reason}; {fix}, "
                            "or pass on_unreadable='skip' to leave out what cannot be loaded")
        self.refused.append((key, reason))

    def files(self) -> list[tuple[str, int]]:
        """Every regular file to read, as (key, size in bytes) in key order; the rest refused or left out."""
        found: list[tuple[str, int]] = []
        folders = [""]
        while folders:
            folder = folders.pop()
            for entry in self.entries(folder):
                self.visit(entry, folder + entry.name, folders, found)
        return self.without_clashes(sorted(found))

    def without_clashes(self, found: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """`found` less one key of each pair one folder cannot hold on every system (`SKILL.md` and
        `skill.md` on a case-sensitive disk), which `FileTree` would refuse: the stray beside a name
        a host needs spelt so (`NEEDED_NAMES`), else the later in key order."""
        dropped: set[str] = set()
        for kept, stray in clashes(key for key, _ in found):
            if stray in NEEDED_NAMES and kept not in NEEDED_NAMES:
                kept, stray = stray, kept
            fix = "rename it" if kept in NEEDED_NAMES else "rename one of them"
            self.refuse(stray, f"it and {kept!r} would be one file on a case-insensitive or normalising "
                               "file system", f"{fix}, or {_exclude(stray)}")
            dropped.add(stray)
        return [(key, size) for key, size in found if key not in dropped]

    def entries(self, folder: str) -> list[os.DirEntry]:
        """The entries of `folder` (a key prefix ending in "/", or "" for the root) by name."""
        try:
            with os.scandir(self.root / folder) as listing:
                return sorted(listing, key=lambda entry: entry.name)
        except OSError as exc:
            if not folder:
                raise UserError(f"cannot list {str(self.root)!r} ({exc.strerror}); check its permissions") from exc
            self.refuse(folder.rstrip("/"), f"the folder cannot be listed ({exc.strerror})", "check its permissions")
            return []

    def visit(self, entry: os.DirEntry, key: str, folders: list[str], found: list[tuple[str, int]]) -> None:
        """Sort one entry: left out, refused, a folder to walk, or a file to read. Nothing is followed:
        the type comes from the entry itself (lstat), never from what a link points to."""
        is_dir, is_link = entry.is_dir(follow_symlinks=False), entry.is_symlink()
        if is_skipped(entry.name, is_dir, is_link) or _matches(key, self.exclude):
            return
        if is_link:
            return self.refuse(key, f"it is a symlink (to {_link_target(entry)!r}), and symlinks are never followed",
                               f"put the file or folder itself there, or {_exclude(key)}")
        if is_dir:
            if self.safe(key):
                folders.append(key + "/")
            return
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError as exc:
            self.refuse(key, f"it cannot be read ({exc.strerror})", f"check it, or {_exclude(key)}")
            return None
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "a special file")
            self.refuse(key, f"it is {kind}, not a regular file", f"remove it, or {_exclude(key)}")
            return None
        if self.include is not None and not _matches(key, self.include):
            return
        if not self.safe(key):
            return
        if info.st_size > self.max_file_bytes:
            self.refuse(key, _over(info.st_size, "max_file_bytes", self.max_file_bytes), _bigger_or_exclude(key))
            return None
        found.append((key, info.st_size))
        if not self.skip and len(found) > self.max_files:
            raise UserError(f"cannot load {str(self.root)!r}: it holds more than max_files={self.max_files:,} files; "
                            "pass load_tree(..., max_files=...) a larger limit, or exclude= the folders not needed")

    def safe(self, key: str) -> bool:
        """Whether `key` can be a key of a folder artifact; refuses it when not."""
        reason = unsafe_key_reason(key)
        if reason:
            self.refuse(key, f"its path cannot be a key: {reason}", f"rename it, or {_exclude(key)}")
        return reason is None

    def read(self, files: list[tuple[str, int]]) -> dict[str, str]:
        """The text of `files` (in key order) that fit `max_files` and `max_total_bytes`."""
        if not self.skip:
            self.check_total(files)
        tree: dict[str, str] = {}
        total, count, full = 0, 0, None
        for key, size in files:
            full = full or self.full(count + 1, total + size)
            if full:
                self.refuse(key, full, "pass load_tree(...) a larger limit")
                continue
            text = self.text(key)
            if text is not None:
                tree[key] = text
            if text is not None or key in (self.binary or {}):
                total, count = total + size, count + 1
        return tree

    def full(self, files: int, total: int) -> str | None:
        """Why a tree of `files` files and `total` bytes is past a limit, or None."""
        if files > self.max_files:
            return f"it is past max_files={self.max_files:,}"
        if total > self.max_total_bytes:
            return f"it is past max_total_bytes={self.max_total_bytes:,}"
        return None

    def check_total(self, files: list[tuple[str, int]]) -> None:
        total = sum(size for _, size in files)
        if total > self.max_total_bytes:
            largest = ", ".join(f"{k} ({s:,} bytes)" for k, s in sorted(files, key=lambda f: -f[1])[:3])
            raise UserError(f"cannot load {str(self.root)!r}: its files hold {total:,} bytes in all, over "
                            f"max_total_bytes={self.max_total_bytes:,} (largest: {largest}); "
                            "pass load_tree(..., max_total_bytes=...) a larger limit, or exclude= what is not needed")

    def text(self, key: str) -> str | None:
        """The file's text, or None when it is refused (skip mode); never reads past the size limit."""
        try:  # each folder on the way opened without following a link: one swapped in meanwhile is refused
            fd = atomic.open_in(self.real, key, _OPEN_FLAGS)
        except OSError as exc:
            self.refuse(key, f"it cannot be opened ({exc.strerror})", f"check it, or {_exclude(key)}")
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                self.refuse(key, "it stopped being a regular file while the folder was read", "load it again")
                return None
            if self.executable is not None and info.st_mode & 0o111:
                self.executable.add(key)  # `refuse` takes it back
            data = handle.read(min(info.st_size, self.max_file_bytes) + 1)
            if len(data) > info.st_size:  # it grew since: read on to the limit, not to its end
                data += handle.read(self.max_file_bytes + 1 - len(data))
        if len(data) > self.max_file_bytes:
            self.refuse(key, _over(len(data), "max_file_bytes", self.max_file_bytes), _bigger_or_exclude(key))
            return None
        return self.decoded(key, data)

    def decoded(self, key: str, data: bytes) -> str | None:
        """`data` as text: strict UTF-8, nothing normalised; a NUL byte marks a binary file. One that
        is not text goes to `binary` where that is given, else is refused naming what it looks saved as."""
        said = reading.not_text(data)
        if said is None:
            return data.decode("utf-8")
        why = f"it is {said}"
        if self.binary is not None:
            self.binary[key] = data
            return None
        fix = f"a tree holds text files only: {_exclude(key)}"
        self.refuse(key, why, fix if said.startswith("binary") else f"save it as UTF-8, or {fix}")
        return None


def _over(size: int, limit_name: str, limit: int) -> str:
    """_over(1500, "max_file_bytes", 1000) == "it holds 1,500 bytes, over max_file_bytes=1,000" """
    return f"it holds {size:,} bytes, over {limit_name}={limit:,}"


def is_skipped(name: str, is_dir: bool, is_link: bool) -> bool:
    """Whether an entry is always left out (by `load_tree`, and by a restore, which leaves editor
    and cache litter as it is): is_skipped(".venv", False, True) is True (a linked venv)"""
    if (is_dir or is_link) and _FOLDER_NAME.match(name):
        return True
    return not is_dir and _FILE_NAME.match(name) is not None


def _bigger_or_exclude(key: str) -> str:
    return f"pass load_tree(..., max_file_bytes=...) a larger limit, or {_exclude(key)}"


def _link_target(entry: os.DirEntry) -> str:
    try:
        return os.readlink(entry.path)
    except OSError:
        return "?"


def _exclude(key: str) -> str:
    """The argument that leaves out exactly `key`: _exclude("a[1].md") == "exclude=['a[[]1].md']" """
    literal = re.sub(r"([*?[])", r"[\1]", key)
    return f"exclude=[{literal!r}]"
