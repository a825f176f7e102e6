"""Path safety: which keys may become files, and which two keys would be one file somewhere.

A key of a folder artifact is a relative posix path that ends up in a git tree and on the user's
disk, on any file system. So a key is refused when a file system or git would read it as
something else: an absolute or parent path, a drive or stream (`C:`, `a:b`), a control or
invisible character, a name that is not valid or not NFC Unicode, a name Windows strips or
reserves (`con.md`, `NUL`, `COM1`, a trailing dot or space), an alias of git's own metadata
(`.git` in any case, `GIT~1`, `.git.`, `.gitmodules`, `.gitattributes`), or a name too long to
write atomically (the temporary file of the write needs room beside it).

`fold` gives the name two keys share on a case-insensitive, normalising, forgiving reader, so
that `Hooks/pre.sh`, a look-alike `hооks/pre.sh` (Cyrillic о) and the NFD spelling all meet the
pattern that freezes `hooks/*`, and `clashes` finds keys that one folder cannot hold together.

Left out: what a key's layer is (`layers`) and where the folder is on disk (the write-back
checks symlinks there).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

MAX_NAME_BYTES = 200  # of one path segment: leaves room for an atomic write's temp name (NAME_MAX is 255)
MAX_KEY_BYTES = 1024

_DEVICES = re.compile(r"(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)(\..*)?", re.IGNORECASE)
_GIT_SPECIAL = {".git", ".gitmodules", ".gitattributes"}
_GIT_SHORT_NAME = re.compile(r"git~\d+", re.IGNORECASE)  # the 8.3 alias Windows gives `.git`
# Letters of other scripts drawn like Latin ones: enough for the names a skill folder holds.
_LOOK_ALIKE = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s",
    "ԁ": "d", "һ": "h", "ӏ": "l", "ο": "o", "α": "a", "ρ": "p", "ν": "v", "τ": "t", "ι": "i", "κ": "k",
})


def unsafe_key_reason(key: object) -> str | None:
    """Why `key` cannot be a relative file path on every system, or None.

    unsafe_key_reason("references/api.md") is None; unsafe_key_reason("../x") names the '..'."""
    if not isinstance(key, str):
        return f"key {key!r} is not a str"
    if not key:
        return "a key must not be empty"
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError:
        return f"key {key!r} is not valid Unicode (it holds a lone surrogate)"
    if key.startswith("/") or "\\" in key or ":" in key:
        return f"key {key!r} must be a relative path with '/' separators and no drive or stream ':'"
    reserved = next((c for c in key if c in '<>"|?*'), None)
    if reserved is not None:
        return f"key {key!r} holds {reserved!r}, which Windows file names cannot"
    if len(encoded) > MAX_KEY_BYTES:
        return f"key {key[:60]!r}... is longer than {MAX_KEY_BYTES} bytes"
    if unicodedata.normalize("NFC", key) != key:
        return f"key {key!r} is not in NFC form; use {unicodedata.normalize('NFC', key)!r}"
    hidden = next((c for c in key if unicodedata.category(c) in ("Cc", "Cf", "Co", "Cn", "Zl", "Zp")), None)
    if hidden is not None:
        return f"key {key!r} holds a control or invisible character (U+{ord(hidden):04X})"
    return next((reason for part in key.split("/") if (reason := _segment_reason(key, part))), None)


def _segment_reason(key: str, part: str) -> str | None:
    if part in ("", ".", ".."):
        return f"key {key!r} has an empty, '.' or '..' segment"
    if len(part.encode("utf-8")) > MAX_NAME_BYTES:
        return f"key {key[:60]!r}... has a name longer than {MAX_NAME_BYTES} bytes"
    if part != part.rstrip(". "):
        return f"key {key!r} has a name ending in a dot or a space, which Windows drops"
    folded = fold(part)
    if folded in _GIT_SPECIAL or _GIT_SHORT_NAME.fullmatch(folded):
        return f"key {key!r} reaches git's own metadata ({part!r} is read as {folded!r})"
    if _DEVICES.fullmatch(part.strip()):
        return f"key {key!r} uses a reserved device name ({part!r})"
    return None


def is_git_repository(name: str) -> bool:
    """Whether a folder's entry named `name` is git's own repository there: a `.git` folder, or the
    `.git` file of a worktree or a submodule. is_git_repository(".git") is True"""
    return fold(name) == ".git"


@functools.lru_cache(maxsize=65536)  # the same keys are folded at every step
def fold(text: str) -> str:
    """The spelling two names share on a case-insensitive, normalising reader, look-alike letters
    and invisible characters included. fold("Hооks/PRE.sh") == fold("hooks/pre.sh") == "hooks/pre.sh" """
    visible = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return visible.casefold().translate(_LOOK_ALIKE)


def clashes(keys: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of keys one folder cannot hold together: a file and a folder of the same name
    (`notes.md` and `notes.md/x.md`), or two names one file system reads as one (`SKILL.md` and
    `skill.md`, `Refs/a.md` and `refs/b.md`). clashes(["a", "a/b"]) == [("a", "a/b")]"""
    files: dict[str, str] = {}  # folded file path -> its key
    folders: dict[str, tuple[str, str]] = {}  # folded folder path -> (its spelling, a key under it)
    found: list[tuple[str, str]] = []
    for key in sorted(set(keys)):
        parts = key.split("/")
        for depth in range(1, len(parts) + 1):
            path = "/".join(parts[:depth])
            folded = fold(path)
            if folded in files:
                found.append((files[folded], key))
                break
            if folded in folders and (depth == len(parts) or folders[folded][0] != path):
                found.append((folders[folded][1], key))
                break
            if depth < len(parts):
                folders.setdefault(folded, (path, key))
            else:
                files[folded] = key
    return found
