"""The record of the backups write-backs made, kept in the user's AgentDescent home rather than
beside the target, where anyone who can put a folder there (a cloned repository) could forge one.

One file for each target, `$AGENTDESCENT_HOME/backups/<hash of the target's path>.json`:

    {"format": 1, "target": "/home/me/skills/my-skill",
     "backups": [{"folder": "my-skill.bak-1", "number": 1, "made_by": "write_to", "existed": true,
                  "phase": "done", "paths": ["SKILL.md"], "digest": "9f86d0...", "run": "my-skill-3f9a2c"}]}

The target's path is absolute with its parent's symlinks resolved, so that two spellings of one
folder share a record. The file is rewritten whole and atomically, by a caller holding the
target's lock (`targetlock`). `digest` is taken once the copy is complete: see `digest`.

Left out: deciding what a record means for a folder on disk (`backups`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError, field_validator

from agentdescent import atomic
from agentdescent.artifacts.putback import lstat, path_reason
from agentdescent.errors import UserError
from agentdescent.home import HOME_ENV, home
from agentdescent.walking import walk

Phase = Literal["copying", "applying", "done", "rolled back", "removing"]
MadeBy = Literal["write_to", "restore"]


class Record(BaseModel):
    """One backup folder this package made beside the target, and the write it belongs to."""

    folder: str  # the folder's name beside the target, `<name>.bak-<number>`
    number: int
    made_by: MadeBy
    existed: bool  # whether the target was there when the backup was taken
    phase: Phase
    paths: list[str] = []  # every path the write changes, relative posix; "" is the target itself
    digest: str | None = None  # of the complete copy (see `digest`); None while copying or with no copy
    after: dict[str, str] | None = None  # what each of `paths` held once the write ended (`seen`); None: unknown
    modes: dict[str, int] | None = None  # the mode bits of each of `paths` that was a file then; None: unknown
    run: str | None = None  # the stored run whose accept took it; None: a restore, or a write-back outside a run

    @field_validator("paths")
    @classmethod
    def _inside(cls, paths: list[str]) -> list[str]:
        bad = next((p for p in paths if path_reason(p)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not a path inside the target: {path_reason(bad)}")
        return paths


class Targets(BaseModel):
    """The registry file of one target: every backup of it still on record, oldest first."""

    format: Literal[1] = 1
    target: str
    backups: list[Record] = []


def folder() -> Path:
    """Where the registry files are: `$AGENTDESCENT_HOME/backups`."""
    return home() / "backups"


def key(target: Path) -> str:
    """The target's path as the registry names it: absolute, its parent's symlinks resolved."""
    return os.path.join(os.path.realpath(target.parent), target.name)


def file_of(target: Path) -> Path:
    return folder() / f"{hashlib.sha256(os.fsencode(key(target))).hexdigest()[:32]}.json"


def load(target: Path) -> list[Record]:
    """The records of `target`'s backups, oldest first (none when it has no file yet)."""
    path = file_of(target)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UserError(f"cannot read the record of {target}'s backups, {path}: {exc.strerror or exc}; make it "
                        f"readable, or set {HOME_ENV} to the home its backups were made with") from exc
    try:
        held = Targets.model_validate_json(text)
    except ValidationError as exc:
        raise UserError(f"the record of {target}'s backups, {path}, is damaged ({exc.error_count()} problems); "
                        "delete it to go on: the backups it recorded are then left alone as unknown") from None
    if held.target != key(target):
        raise UserError(f"{path} records the backups of {held.target}, not {target}; move it away to go on")
    return sorted(held.backups, key=lambda r: r.number)


def save(target: Path, records: list[Record]) -> None:
    """Replace `target`'s records (the caller holds its lock); with none left, the file goes."""
    path = file_of(target)
    try:
        for temp in atomic.stray_temps([path]):  # what a writer killed mid-save left
            temp.unlink(missing_ok=True)
        if records:
            body = Targets(target=key(target), backups=sorted(records, key=lambda r: r.number))
            atomic.write_text(path, body.model_dump_json(indent=1) + "\n")
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise UserError(f"cannot record {target}'s backups in {path}: {exc.strerror or exc}; make {folder()} "
                        f"writable or set {HOME_ENV} to a writable folder") from exc


CHUNK = 1 << 20  # bytes a digest reads at a time


def digest(root: Path) -> str:
    """sha256 over what `root` holds, walked without following links, in sorted order: for each
    entry its type, its path relative to `root` ("" for `root`), its mode bits, and its bytes (a
    file) or where it points (a link); each field length-prefixed, so no two trees share a stream."""
    hashed = hashlib.sha256()
    for rel, info in _walk(root):
        kind = stat.S_IFMT(info.st_mode)
        path = root / rel if rel else root
        for field in (str(kind).encode(), os.fsencode(rel), str(stat.S_IMODE(info.st_mode)).encode()):
            hashed.update(len(field).to_bytes(8, "big") + field)
        if stat.S_ISREG(kind):  # read a megabyte at a time: a large file costs time, not memory
            hashed.update(info.st_size.to_bytes(8, "big"))
            with open(path, "rb") as file:
                while chunk := file.read(CHUNK):
                    hashed.update(chunk)
        else:
            body = os.fsencode(os.readlink(path)) if stat.S_ISLNK(kind) else b""
            hashed.update(len(body).to_bytes(8, "big") + body)
    return hashed.hexdigest()


def seen(path: Path) -> str:
    """What is at `path`, to tell later whether it changed: a file's digest, a link's target, or
    its kind (absent, a folder, ...)."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    if stat.S_ISLNK(info.st_mode):
        return f"link {os.readlink(path)}"
    if not stat.S_ISREG(info.st_mode):
        return f"kind {stat.S_IFMT(info.st_mode)}"
    return f"file {file_digest(path)}"


def file_modes(target: Path, paths: list[str]) -> dict[str, int]:
    """The mode bits of each of `paths` under `target` that is a regular file (`seen` tells bytes only)."""
    infos = {rel: lstat(target / rel) for rel in paths}
    return {rel: stat.S_IMODE(info.st_mode) for rel, info in infos.items() if info and stat.S_ISREG(info.st_mode)}



def seen_bytes(data: bytes) -> str:
    """What `seen` says of a file that holds `data`."""
    return f"file {hashlib.sha256(data).hexdigest()}"


def saved_since(target: Path, source: Path | None, rel: str, written: str | None) -> bool:
    """Whether `rel` under `target` holds neither what a write put there (`written`, as `seen` says
    it) nor what it held before (under `source`, the write's backup copy; absent where None):
    someone saved it since."""
    now = seen(target / rel)
    return written is not None and now != written and now != (seen(source / rel) if source else "absent")


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, read a megabyte at a time: a large file costs time, not memory."""
    hashed = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            hashed.update(chunk)
    return hashed.hexdigest()


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    info = os.lstat(root)
    found = [("", info)]
    if not stat.S_ISDIR(info.st_mode):
        return found
    for here, dirs, files in walk(root):  # os.walk lists a symlink to a folder but never enters it
        rel = os.path.relpath(here, root)
        for name in (*dirs, *files):
            path = name if rel == "." else f"{rel}/{name}"
            found.append((path, os.lstat(os.path.join(here, name))))
    return sorted(found, key=lambda entry: os.fsencode(entry[0]))
