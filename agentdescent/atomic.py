"""Atomic file writes: a reader sees the old file or the new one, never half of either.

The new content goes to a temp file beside the target, then `os.replace` puts it in place. The
temp file's name is short whatever the target's (`.<first 32 characters>.<8 hex>.tmp`), so a
target name near the file system's 255-byte limit still has room for it, and `stray_temps` can
find what a killed write left behind. `write_bytes_in` writes below a root with no folder on the
way reached through a symlink, even one swapped in while it runs (`parent_of`). Left out: fsync
(a write survives the process dying, not the machine losing power) and locking (two writers of
one file: the last `os.replace` wins).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import SupportsRead

_STEM_CHARS = 32
_NEW_FILE_MODE = 0o666  # what open(path, "w") asks for; the kernel takes the umask off
_TEMP_TAIL = re.compile(r"[0-9a-f]{8}\.tmp")  # after the prefix: `.SKILL.md.` + `1f2e3d4c.tmp`


def write_text(path: str | os.PathLike, text: str, *, mode: int | None = None) -> None:
    """Write `text` (utf-8, no newline translation) to `path` atomically; see `write_bytes`. A long
    text is encoded a block at a time, never held twice over (as text and as its bytes)."""
    write_bytes(path, text.encode("utf-8") if len(text) <= _TEXT_BLOCK else _Encoded(text), mode=mode)


_TEXT_BLOCK = 1 << 20  # characters encoded at a time


class _Encoded(io.RawIOBase):
    """`text` as a stream of its UTF-8 bytes, for `shutil.copyfileobj`."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = len(self.text) if size is None or size < 0 else max(size // 4, 1)  # up to 4 bytes a character
        block = self.text[self.at:self.at + size]
        self.at += len(block)
        return block.encode("utf-8")


def write_bytes(path: str | os.PathLike, data: bytes | SupportsRead[bytes], *, mode: int | None = None) -> None:
    """Write `data` (bytes, or a file open for reading, copied a block at a time) to `path` through
    a temp file in the same folder and `os.replace`, creating the folder if needed. `mode` sets the
    permission bits; None keeps an existing file's bits and gives a new file what `open(path, "w")`
    would under the current umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = _current_mode(path)
    tmp, fd = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.chmod(handle.fileno() if os.chmod in os.supports_fd else tmp, mode)
            if isinstance(data, bytes):
                handle.write(data)
            else:
                shutil.copyfileobj(data, handle)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_in(root: Path, rel: str, data: bytes | SupportsRead[bytes], *, mode: int | None = None) -> None:
    """`write_bytes` of `root/rel` ("" for `root` itself), where each folder below `root` is
    opened without following a symlink and the file is made and replaced through its folder's
    descriptor: a folder swapped for a link while this runs fails the write (`OSError`) rather
    than send it outside `root`."""
    with parent_of(root, rel, create=True) as (folder, name):
        if mode is None:
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                mode = None if stat.S_ISLNK(info.st_mode) else stat.S_IMODE(info.st_mode)
        while True:
            tmp = f"{_temp_prefix(Path(name))}{secrets.token_hex(4)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             _NEW_FILE_MODE, dir_fd=folder)
                break
            except FileExistsError:
                continue
        try:
            with os.fdopen(fd, "wb") as handle:
                if mode is not None:
                    os.fchmod(handle.fileno(), mode)
                if isinstance(data, bytes):
                    handle.write(data)
                else:
                    shutil.copyfileobj(data, handle)
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise


@contextlib.contextmanager
def parent_of(root: Path, rel: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
    """(a descriptor of the folder `rel` lies in, its last name) for `rel` below `root`, each
    folder on the way opened without following a symlink (`OSError` ELOOP naming the one that
    is), and made when missing if `create`. For "" it is `root` in its parent, as given."""
    if not rel:
        parent = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield parent, root.name
        finally:
            os.close(parent)
        return
    *folders, name = rel.split("/")
    fd, here = _open_folder(None, str(root), root), root
    try:
        for part in folders:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            here = here / part
            below = _open_folder(fd, part, here)
            os.close(fd)
            fd = below
        yield fd, name
    finally:
        os.close(fd)


def open_in(root: Path, rel: str, flags: int) -> int:
    """`os.open` of `root/rel` with `flags`, the last name and every folder on the way opened
    without following a symlink (`parent_of`); the caller closes the descriptor."""
    with parent_of(root, rel) as (folder, name):
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)


def _open_folder(fd: int | None, name: str, shown: Path) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(shown):
            raise OSError(errno.ELOOP, "a folder on the way is a symlink, and none is followed",
                          str(shown)) from None
        raise


def write_text_in(root: Path, rel: str, text: str, *, mode: int | None = None) -> None:
    """`write_text` of `root/rel`, reached as `write_bytes_in` reaches a file: `root` is never
    made (`FileNotFoundError` when it is not there)."""
    write_bytes_in(root, rel, text.encode("utf-8") if len(text) <= _TEXT_BLOCK else _Encoded(text), mode=mode)


def write_symlink_in(root: Path, rel: str, points_to: str) -> None:
    """`write_symlink` of `root/rel`, reached as `write_bytes_in` reaches a file."""
    with parent_of(root, rel, create=True) as (folder, name):
        while True:
            tmp = f"{_temp_prefix(Path(name))}{secrets.token_hex(4)}.tmp"
            try:
                os.symlink(points_to, tmp, dir_fd=folder)
                break
            except FileExistsError:
                continue
        try:
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise


def write_symlink(path: str | os.PathLike, points_to: str) -> None:
    """Make `path` a symlink to `points_to`, replacing what is there in one `os.replace`."""
    path = Path(path)
    while True:
        tmp = _temp_name(path)
        try:
            os.symlink(points_to, tmp)
        except FileExistsError:
            continue
        break
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stray_temps(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The temp files interrupted writes of `paths` may have left beside them (one listing of
    each folder, however many paths share it)."""
    wanted: dict[Path, set[str]] = {}
    for path in map(Path, paths):
        wanted.setdefault(path.parent, set()).add(_temp_prefix(path))
    found = []
    for folder, prefixes in wanted.items():
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        found += [folder / n for n in names if _TEMP_TAIL.fullmatch(n[-12:]) and n[:-12] in prefixes]
    return found


def _current_mode(path: Path) -> int | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(info.st_mode)


def _temp_prefix(path: Path) -> str:
    return f".{path.name[:_STEM_CHARS]}."


def _temp_name(path: Path) -> Path:
    return path.with_name(f"{_temp_prefix(path)}{secrets.token_hex(4)}.tmp")


def _create_temp(path: Path) -> tuple[Path, int]:
    # Not tempfile.mkstemp: it makes every file 0600, and a new file should get the umask's mode.
    # O_EXCL also refuses a symlink planted at the name, dangling or not.
    while True:
        tmp = _temp_name(path)
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _NEW_FILE_MODE)
        except FileExistsError:
            continue
        except OSError as exc:  # a folder not writable, a disk full: named by the file meant, not its temp
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
