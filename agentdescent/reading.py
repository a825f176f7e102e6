"""Reading a file someone named (a run spec, a tasks file, a text target) as bounded data.

A path given to us may be anything: a FIFO that never ends, `/dev/zero`, a kernel file under
`/proc` whose size says 0, a folder, or a file of gigabytes. `read_bytes` reads only a regular
file that is not under a system folder (`/proc`, `/sys`, `/dev`, by real path), up to a size
limit, within a deadline, and refuses anything else with a `UserError` that says what the path is
and what to give instead. The file is opened non-blocking, so a FIFO is never waited on: its
`fstat` says it is no regular file and it is refused at once.

    read_text("run.yaml", what="run spec", limit=1_000_000)  ==  "target: prompt.md\\n..."

`read_text` decodes strictly (UTF-8, line endings as on disk, a NUL byte means binary);
`not_text` says why some bytes are not UTF-8 text, naming the encoding they look saved in.
`nul_at` and `surrogate_at` find, in parsed data, text no file can hold: a NUL, and a lone surrogate
(the JSON or YAML escape `\\ud800` with no pair), which no UTF-8 spells, so that it is refused where
it is read rather than when the data is written again; `writable` keeps each one in a text a
program made (a file name from `os.fsdecode`, in an error) as its escape, so that it can be written.
`path_too_long` and `unusable_path` say when the system refuses a path for what it is (a name too
long, a symlink loop) rather than for what the disk holds.
`name_or_count` is how an error may mention a word taken from such a file: the word itself when
it looks like a name, else only how long it is, so that an error never repeats a file's lines.

Left out: locking, and reading a file that changes while it is read (the bytes up to the limit
are what was read; a file that grew past the limit is refused).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from agentdescent.errors import UserError

SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")  # kernel views and devices: never data
DEADLINE_SECONDS = 30.0
_CHUNK = 1 << 16
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symlink"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,39}")
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, any code point here is an unpaired surrogate
NAME_MAX, PATH_MAX = 255, 4096  # bytes the system takes in one name of a path and in a whole path (Linux, macOS)
_MARKS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
          (b"\xfe\xff", "UTF-16"))  # byte-order marks, the longer first: UTF-32's starts as UTF-16's does
SURROGATE_FIX = ("holds a lone surrogate (an escape such as \\ud800 with no pair), which no UTF-8 text can hold; "
                 "write the character itself or remove it")


def read_bytes(path: str | os.PathLike, *, what: str, limit: int, follow_symlinks: bool = True,
               deadline: float = DEADLINE_SECONDS) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them, read within `deadline`
    seconds. `what` names the file in errors ("run spec"). Raises `UserError` (saying what the path
    is and the fix) for a missing or unreadable path, anything but a regular file, a path whose
    real path is under a system folder, a file over `limit` bytes, and a read past the deadline.
    `follow_symlinks=False` refuses a symlink at `path` itself."""
    shown = f"the {what} {str(path)!r}"
    if "\0" in os.fspath(path):
        raise UserError(f"{shown} holds a NUL character, which no path can hold; give the path without it")
    _refuse_system(os.path.realpath(path), shown)  # before opening: opening a device can act on it
    fd = _open(path, shown, follow_symlinks)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{shown} is {kind(info.st_mode)}, not a regular file; give the path of a file that holds "
                            f"the {what}")
        _refuse_system(_real_path_of(fd, path), shown)  # what was opened, whatever the path meant a moment ago
        if info.st_size > limit:
            raise UserError(_too_big(shown, what, limit, f"{info.st_size:,} bytes"))
        return _read_all(fd, shown, what, limit, time.monotonic() + deadline)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, *, what: str, limit: int, follow_symlinks: bool = True,
              deadline: float = DEADLINE_SECONDS, encoding: str = "utf-8") -> str:
    """`read_bytes` decoded strictly, nothing normalised (line endings stay as on disk); `encoding`
    is utf-8 or utf-8-sig (a byte-order mark dropped). Also raises `UserError` for a file with a
    NUL byte (binary) or that is not valid in `encoding`."""
    data = read_bytes(path, what=what, limit=limit, follow_symlinks=follow_symlinks, deadline=deadline)
    why = not_text(data.removeprefix(b"\xef\xbb\xbf") if encoding == "utf-8-sig" else data)
    if why is not None:
        fix = f"the {what} must be a text file" if why.startswith("binary") else "save it as UTF-8"
        raise UserError(f"the {what} {str(path)!r} is {why}; {fix}")
    return data.decode(encoding)


def not_text(data: bytes) -> str | None:
    """Why `data` is not UTF-8 text, naming what it looks saved as; None when it is UTF-8 text.
    not_text(b"\xff\xfeh\x00") == "UTF-16 (it starts with the byte-order mark FF FE)" """
    for mark, name in _MARKS:  # Excel's "Unicode Text", PowerShell's Out-File, Notepad's "Unicode"
        if data.startswith(mark):
            return f"{name} (it starts with the byte-order mark {mark.hex(' ').upper()})"
    if b"\0" in data:
        return f"binary (a NUL byte at offset {data.index(0):,})"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"not valid UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start:,}; Latin-1 or Windows-1252, as "
                "older editors save)")
    return None


def kind(mode: int) -> str:
    """What a file of `mode` (`os.stat`'s `st_mode`) is, in words: kind(stat.S_IFIFO) == "a FIFO"."""
    return "a regular file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "a special file")


def in_the_way(path: str | os.PathLike) -> Path | None:
    """The folder on `path`'s way that is there and is no folder (a file, a FIFO), below which
    nothing can be made; None when there is none, or the first that cannot be looked at comes
    before one (what makes `path` says what is wrong then). in_the_way("notes.txt/ledger") is
    Path("notes.txt") where notes.txt is a file."""
    for folder in reversed(Path(path).parents):  # from the root down
        try:
            mode = os.stat(folder).st_mode
        except OSError:  # not there (making `path` makes it), or not to be looked at
            return None
        if not stat.S_ISDIR(mode):
            return folder
    return None


def system_folder(path: str | os.PathLike) -> str | None:
    """The system folder (`/proc`, `/sys`, `/dev`) the real path of `path` is in, or None."""
    real = Path(os.path.realpath(path))
    return next((folder for folder in SYSTEM_FOLDERS if real == Path(folder) or Path(folder) in real.parents), None)


def nul_at(data: object, where: str = "") -> str | None:
    """Where a NUL character is in a string of `data` (mappings and lists walked), as a dotted
    field name, or None: no path, module or pattern can hold one.
    nul_at({"tasks": {"file": "t\0.jsonl"}}) == "tasks.file" """
    return next((place for place, text, _ in _strings(data, where) if "\0" in text), None)


def surrogate_at(data: object, where: str = "") -> tuple[str, bool] | None:
    """Where a lone surrogate is in `data` (mappings, with their keys, and lists walked): the dotted
    field name, and whether it is in a key of that field (the dotted name then is the mapping's,
    "" at the top) rather than in its value; None when there is none.
    surrogate_at({"prompt": "{task}\\ud800"}) == ("prompt", False)
    surrogate_at({"tasks": {"\\ud800": 1}}) == ("tasks", True) """
    return next(((place, is_key) for place, text, is_key in _strings(data, where, keys=True) if _SURROGATE.search(text)),
                None)


def writable(text: str) -> str:
    """`text` with each lone surrogate as its escape, so that a UTF-8 file can hold it: what a
    program's text may carry when bytes that are not UTF-8 were decoded with surrogateescape (a
    file name from `os.fsdecode`). writable("data-\\udcff.txt") == "data-\\\\udcff.txt" """
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _strings(data: object, where: str = "", *, keys: bool = False) -> Iterator[tuple[str, str, bool]]:
    """(dotted place, text, whether it is a mapping's key) of each string in `data`, depth first in
    order, a mapping's keys before its values; walked with a stack, not a recursion, so that a row
    nested hundreds deep is read, not a RecursionError."""
    stack: list[tuple[object, str]] = [(data, where)]
    while stack:
        value, place = stack.pop()
        if isinstance(value, str):
            yield (place or "value"), value, False
            continue
        if isinstance(value, dict):
            if keys:
                yield from ((place, key, True) for key in value if isinstance(key, str))
            items = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            continue
        stack.extend((item, f"{place}.{key}".strip(".")) for key, item in reversed(items))


def path_too_long(path: str | os.PathLike) -> str | None:
    """Why the system would refuse `path` by its length alone (a name in it over `NAME_MAX` bytes,
    or the whole over `PATH_MAX`), with the fix; None when it would not."""
    data = os.fsencode(path)
    if len(data) < PATH_MAX and all(len(name) <= NAME_MAX for name in data.split(b"/")):
        return None
    return _too_long(path)


def unusable_path(exc: BaseException) -> str | None:
    """`exc` worded with its fix when the system refused the path it names for what the path is: a
    name too long (ENAMETOOLONG), a symlink loop or a symlink where none is followed (ELOOP); None
    for any other error, whose cause is the disk or the file."""
    if not isinstance(exc, OSError) or exc.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
        return None
    path = exc.filename if exc.filename is not None else exc.filename2
    if exc.errno == errno.ENAMETOOLONG:
        return _too_long(path)
    return (f"cannot follow the path {shown_path(path)}: {exc.strerror or 'too many levels of symbolic links'}; "
            "give a path through real folders, with no symlink that leads back to itself")


def _too_long(path: object) -> str:
    return (f"the path {shown_path(path)} is too long for the system (a name in it over {NAME_MAX} bytes, or the "
            f"whole over {PATH_MAX}); give a shorter path")


def shown_path(path: object) -> str:
    """A path for one line of an error: quoted, its start and end when it is long."""
    if path is None:
        return "given"
    text = os.fsdecode(path) if isinstance(path, bytes | os.PathLike) else str(path)
    return repr(text if len(text) <= 160 else f"{text[:100]}...{text[-50:]}")


def name_or_count(word: object) -> str:
    """`word` quoted when it looks like a field name, else only its length:
    name_or_count("rouds") == "'rouds'"; name_or_count("alice:$6$x$y:1:::") == "a 17-character entry" """
    text = str(word)
    return repr(text) if looks_like_a_name(text) else f"a {len(text)}-character entry"


def looks_like_a_name(word: object) -> bool:
    """An identifier-like word of at most 40 characters (letters, digits, `_`, `-`)."""
    return isinstance(word, str) and _NAME.fullmatch(word) is not None


def _open(path: str | os.PathLike, shown: str, follow_symlinks: bool) -> int:
    flags = _FLAGS | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        return os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise UserError(f"{shown} is a symlink; give the path of the file itself") from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO's write end: no file to read
            raise UserError(f"{shown} is a socket or a device, not a regular file; give a file's path") from None
        if exc.errno == errno.ENOENT:
            raise UserError(f"{shown} does not exist (resolved: {os.path.abspath(path)}); check the path") from None
        raise UserError(f"cannot read {shown}: {exc.strerror or exc}; check the path and its permissions") from None


def _real_path_of(fd: int, path: str | os.PathLike) -> str:
    """The real path of the open file: from the kernel where it says (Linux), else from `path`."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _refuse_system(real: str, shown: str) -> None:
    folder = system_folder(real)
    if folder is not None:
        raise UserError(f"{shown} is under {folder} (its real path is {real}), where the system keeps devices and "
                        "kernel files, not data; give the path of a file of your own")


def _read_all(fd: int, shown: str, what: str, limit: int, until: float) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > until:
            raise UserError(f"{shown} took too long to read; give a file on a local disk")
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        except BlockingIOError:  # not a regular file after all (fstat was checked): never wait on it
            raise UserError(f"{shown} gives no data without waiting; give a regular file") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # it grew since fstat
            raise UserError(_too_big(shown, what, limit, f"more than {limit:,} bytes"))


def _too_big(shown: str, what: str, limit: int, size: str) -> str:
    return f"{shown} holds {size}, over the {limit:,} bytes a {what} may hold; give a smaller file"
