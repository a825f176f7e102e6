"""A host wired by a block of ours in a file the user owns and files of our own, recorded so that
uninstall takes out exactly what install put in: Codex (config.toml) and DeepSeek Harness
(cordis.patch.yml) are wired this way.

`put_in` writes the marked block (`marked`) and the files after every check has passed (a write
that fails undoes those before it; a block the user edited since install stays unless `force`;
a file the user made read-only is refused, by `take_out` too),
and records them in `$AGENTDESCENT_HOME/hosts/<host>.json` (the file the block is in and whether install created
it, each file written with its sha256, the folders it made); the block's first line names that
record; a file already there exactly as this package ships it is recorded as ours too (the record
that named it may have gone with its home). Installs and uninstalls of one file take turns (an
flock beside its record). `take_out` removes the block (every other byte of the user's file stays), each file only
while it is unchanged since install (an edited one stays, and the answer says so), and the folders
once empty. It reads the record of this home, else the one the block names when it is a record of this very
file (an install made with another AGENTDESCENT_HOME; a block copied from another file names
that file's), else, with no record anywhere, takes out the block and each of our
files that is exactly as this package ships it. Left out: what the block says and how the file is
checked (the host modules).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from agentdescent import atomic, filelock, reading
from agentdescent.errors import UserError
from agentdescent.home import home
from agentdescent.hosts import marked
from agentdescent.hosts.base import Changed

CONFIG_BYTES = 16 << 20  # a host's configuration file: far past what one holds
LOCK_WAIT = 60.0  # seconds an install or uninstall waits for another one of the same file
KEPT_SUFFIX = ".before-agentdescent"  # beside a file of the user's that `install --force` replaced
Check = Callable[[str, str, Path], None]  # (the user's text, the text to write, its path): raise UserError if wrong


@dataclass(frozen=True, kw_only=True)
class Wiring:
    """What install puts where for one host."""

    host: str  # as `agentdescent install HOST` names it
    config: Path  # the user's file our block goes into
    block: str  # the lines between the markers
    check: Check  # called before anything is written
    parses: Callable[[str], bool]  # whether a text of that file parses (uninstall keeps a parsing file parsing)
    wired: Callable[[str], bool]  # whether a text of that file still wires our server (with our markers gone)
    unwire: str  # how to take our server out of that file by hand, for when `wired` says it is left
    files: dict[Path, str] = field(default_factory=dict)  # files of our own: path -> text


class Placed(BaseModel):
    path: str
    sha256: str  # of what install wrote
    replaced: str | None = None  # where the user's own file that `--force` replaced was kept; uninstall puts it back


class Manifest(BaseModel):
    """What install wrote for one host, so that uninstall takes out exactly that."""

    version: int = 1
    host: str
    config: str  # the file our marked block is in
    config_created: bool = False  # install created it: uninstall deletes it when nothing else is left in it
    block_sha256: str | None = None  # of the lines install put between the markers: edited since, they stay
    files: list[Placed] = Field(default_factory=list)
    folders: list[str] = Field(default_factory=list)  # made by install; removed by uninstall once empty


def manifest_path(host: str, config: Path) -> Path:
    """The record of the install for `host` into `config`: one per file wired (two CODEX_HOMEs are
    two installs)."""
    return home() / "hosts" / f"{host}-{hashlib.sha256(str(config).encode('utf-8')).hexdigest()[:12]}.json"


def _legacy_manifest_path(host: str) -> Path:
    return home() / "hosts" / f"{host}.json"  # one record for every install of the host, as installs once kept it


def put_in(wiring: Wiring, *, force: bool = False) -> Changed:
    """Write the block and the files after every check has passed, and record them; a write that
    fails undoes those before it, so that a failed install changes nothing."""
    with _locked(wiring, create=True):
        return _put_in(wiring, force=force)


def _put_in(wiring: Wiring, *, force: bool) -> Changed:
    target = _real(wiring.config)
    if wiring.config.is_symlink() and not target.exists():
        raise UserError(f"{wiring.config} is a link to {target}, which does not exist; create that file (an empty one "
                        "will do) or remove the link, then install again")
    text = read_text(target)
    record = manifest_path(wiring.host, wiring.config)
    old, old_path = _find(wiring.host, wiring.config, text)
    edited = _edited_block(old, text)
    user = marked.remove(text or "")
    if edited and not force:
        new = text
    else:
        new = marked.insert(user, wiring.block, wiring.host, record=str(record))
        wiring.check(user, new, wiring.config)
    if text is not None and new != text:
        _writable(target, wiring, "install", "add our lines to it by hand (docs/hosts.md says which)")
    recorded = {p.path: p.sha256 for p in old.files} if old else {}
    writes = {path: body for path, body in wiring.files.items() if _needs_write(path, body, recorded, force)}
    folders = sorted({str(f) for path in [wiring.config, *writes] for f in _missing_folders(path.parent)})
    replaced = {p.path: p.replaced for p in old.files if p.replaced} if old else {}
    written, kept_aside, undo = [], [], []
    try:
        for path, body in writes.items():
            current = read_text(path)
            if current is not None and recorded.get(str(path)) != sha256(current):  # the user's own, replaced on purpose
                keep = path.with_name(path.name + KEPT_SUFFIX)
                os.replace(path, keep)  # moved, not copied: a link into the user's dotfiles stays a link
                undo.append(functools.partial(os.replace, keep, path))
                replaced[str(path)] = str(keep)
                kept_aside.append(f"kept your {path} as {keep}")
            else:
                undo.append(functools.partial(_put_back, path, current))
            atomic.write_text(path, body)
            written.append(str(path))
        if new is not None and new != text:  # None: no config file, and an edited block keeps it so
            undo.append(functools.partial(_put_back, target, text))
            atomic.write_text(target, new)
            written.insert(0, str(wiring.config))
        # a file not written is there already exactly as this package ships it: ours, as with no record
        # (`_shipped`), whether or not a record says so (the one that did may have gone with its home)
        kept = [Placed(path=str(p), sha256=sha256(b)) for p, b in wiring.files.items() if p not in writes]
        claimed = [str(Path(p.path).parent) for p in kept if p.path not in recorded]  # taken out once empty
        placed = kept + [Placed(path=str(p), sha256=sha256(b)) for p, b in writes.items()]
        manifest = Manifest(host=wiring.host, config=str(wiring.config),
                            # with no record, a file that holds nothing but our block is one install made
                            config_created=text is None or (old.config_created if old else bool(text) and not user),
                            # a block kept as the user edited it is still told from the one install wrote
                            block_sha256=old.block_sha256 if old and edited and not force else sha256(marked.body(new or "") or ""),
                            files=[p.model_copy(update={"replaced": replaced.get(p.path)}) for p in placed],
                            folders=sorted({*folders, *claimed, *(f for f in (old.folders if old else []) if Path(f).is_dir())}))
        atomic.write_text(record, manifest.model_dump_json(indent=1) + "\n")
    except OSError as exc:
        _undo(undo, folders)
        raise _not_installed(wiring.host, exc) from None
    if old_path is not None and old_path != record:
        _forget(old_path)  # the block now names this home's record
    left = ([f"left our block in {wiring.config} as you edited it; `agentdescent install {wiring.host} --force` "
             "writes the one this package ships"] if edited and not force else [])
    if not written:
        return Changed(host=wiring.host, action="install", message="; ".join([f"already installed for {wiring.host} "
                       f"({wiring.config}); nothing changed", *left]),
                       next=f"agentdescent uninstall {wiring.host} takes it out")
    done = [f"wired our MCP server into {wiring.config}"] if str(wiring.config) in written else []
    done += [f"wrote {path}" for path in writes] + kept_aside + left
    return Changed(host=wiring.host, action="install", paths=written, message="; ".join(done))


@contextlib.contextmanager
def _locked(wiring: Wiring, *, create: bool) -> Iterator[None]:
    """Hold an flock beside this install's record for the block: two installs at once would each
    record what the other wrote as not theirs. Without `create`, a home with no `hosts` folder has
    no install of its own to guard."""
    lock = manifest_path(wiring.host, wiring.config).with_suffix(".lock")
    if not create and not lock.parent.is_dir():
        yield
        return
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _not_installed(wiring.host, exc) from None
    with filelock.holding(lock, wait=LOCK_WAIT, busy=f"another `agentdescent install` or `uninstall {wiring.host}` "
                          f"(process {{holder}}) has held {lock} for {LOCK_WAIT:g} s; wait for it to end (or stop it), "
                          "then try again"):
        yield


def _writable(target: Path, wiring: Wiring, verb: str, by_hand: str) -> None:
    """Refuse to change a file its owner made read-only (a write through a temp file and a rename
    would replace it all the same, its mode kept), or that this user may not write."""
    mode = stat.S_IMODE(os.stat(target).st_mode)
    if mode & 0o222 and os.access(target, os.W_OK):
        return
    raise UserError(f"{wiring.config} is read-only (mode {mode:o}), so `agentdescent {verb} {wiring.host}` changed "
                    f"nothing: make it writable (chmod u+w {target}) and run it again, or {by_hand}")


def _not_installed(host: str, exc: OSError) -> UserError:
    return UserError(f"could not install for {host}: {exc.strerror or exc} ({exc.filename}); nothing was changed: fix "
                     "that (a file where a folder should be? a folder you cannot write?), then install again")


def _edited_block(old: Manifest | None, text: str | None) -> bool:
    """Whether the user edited our block since install wrote it (a record that names what it wrote)."""
    found = marked.body(text or "")
    return bool(old and old.block_sha256 and found is not None and sha256(found) != old.block_sha256)


def _put_back(path: Path, text: str | None) -> None:
    """`path` as it was before install wrote it: `text`, or no file."""
    if text is None:
        path.unlink(missing_ok=True)
    else:
        atomic.write_text(path, text)


def _undo(steps: Sequence[Callable[[], None]], folders: list[str]) -> None:
    """Undo the writes of a failed install, newest first, and remove the folders it made."""
    for step in reversed(steps):
        try:
            step()
        except OSError:
            pass  # what cannot be undone stays; the error the caller raises names the cause
    for folder in sorted(folders, key=lambda f: -len(Path(f).parts)):
        _remove_if_empty(Path(folder))


def take_out(wiring: Wiring) -> Changed:
    """Remove our block, the files still as install wrote them and the folders it made, once empty."""
    with _locked(wiring, create=False):
        return _take_out(wiring)


def _take_out(wiring: Wiring) -> Changed:
    manifest, found_at = _find(wiring.host, wiring.config, read_text(_real(wiring.config)))
    config = wiring.config
    target = _real(config)
    text = read_text(target)
    rest = marked.remove(text) if text is not None else None
    if text is not None and rest is not None and rest != text and wiring.parses(text) and not wiring.parses(rest):
        raise UserError(f"taking our block out of {config} would leave it unreadable (lines after it build on it?); "
                        "take the lines between the `# >>> agentdescent` and `# <<< agentdescent` markers out by hand")
    removed, notes = [], []
    if rest is not None and rest != text:
        _writable(target, wiring, "uninstall", "take the lines between the `# >>> agentdescent` and "
                  "`# <<< agentdescent` markers out by hand")
        if rest == "" and manifest and manifest.config_created:
            target.unlink()
        else:
            atomic.write_text(target, rest)
        removed.append(str(config))
    elif manifest:
        notes.append(f"our block was not in {config} any more")
    if rest is not None and wiring.wired(rest) and (manifest or rest != text):  # the host rewrote our markers away
        notes.append(f"{config} still wires our MCP server outside our markers (the host rewrote the file?): "
                     f"{wiring.unwire}")
    elif rest is not None and wiring.wired(rest):  # no block, no record: nothing says install wrote it
        notes.append(f"the MCP server named agentdescent in {config} is your own (no block of ours is there, "
                     "and no record of an install), so it stays as it is")
    placed_files = manifest.files if manifest else _shipped(wiring)
    for placed in placed_files:
        path, current = Path(placed.path), read_text(Path(placed.path))
        if current is None:
            continue
        if sha256(current) == placed.sha256:
            path.unlink()
            removed.append(placed.path)
            if placed.replaced and os.path.lexists(placed.replaced) and not os.path.lexists(path):
                os.replace(placed.replaced, path)  # the user's own file, which install --force replaced
                notes.append(f"put your own {path} back")
        elif manifest:
            notes.append(f"left {path}: it was edited after install (delete it yourself if you do not want it)")
        else:
            notes.append(f"left {path}: it is not the file this package ships (edited, or not ours), and no record "
                         "of an install says whose it is")
    folders = manifest.folders if manifest else [str(Path(p.path).parent) for p in placed_files]
    for folder in sorted(folders, key=lambda f: -len(Path(f).parts)):
        _remove_if_empty(Path(folder))
    if found_at is not None:
        _forget(found_at)
    if not removed:
        message = " ".join(notes) or f"agentdescent is not installed for {wiring.host}; nothing to take out"
        return Changed(host=wiring.host, action="uninstall", message=message)
    done = [f"took our block out of {config}" if path == str(config) else f"removed {path}" for path in removed]
    return Changed(host=wiring.host, action="uninstall", paths=removed, message="; ".join(done + notes))


def read_text(path: Path) -> str | None:
    """The file's text exactly (no newline translation), or None when there is no file. Read as
    bounded data (`reading`): a FIFO or a device there is refused at once, never waited on or read
    without end."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _loop(path) from None
        # reading says what else it is
    data = reading.read_bytes(path, what="host configuration", limit=CONFIG_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; AgentDescent only edits UTF-8 files") from None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _needs_write(path: Path, body: str, recorded: dict[str, str], force: bool) -> bool:
    current = read_text(path)
    if current is None:
        return True
    if current == body:
        return False
    if force or recorded.get(str(path)) == sha256(current):
        return True  # asked to, or the one an earlier install wrote, unchanged since
    raise UserError(f"{path} is there already and is not the file `agentdescent install` wrote (or was edited "
                    f"since); move it away, or install with --force to replace it (yours is kept as {path.name}"
                    f"{KEPT_SUFFIX} beside it, and uninstall puts it back)")


def _missing_folders(folder: Path) -> list[Path]:
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty (or gone): it stays as it is


def _real(path: Path) -> Path:
    """The file a symlinked config points to: writing through the link keeps the user's link."""
    if not path.is_symlink():
        return path
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:  # a link to nothing (yet): written through, it makes the file it names
        return path.resolve()
    except (RuntimeError, OSError):  # a loop: RuntimeError up to Python 3.12, OSError (ELOOP) from 3.13
        raise _loop(path) from None


def _loop(path: Path) -> UserError:
    return UserError(f"{path} is a symlink that leads back to itself (a loop), so neither the host nor AgentDescent "
                     "can read it: remove the link (or point it at a real file), then run the command again")


def _find(host: str, config: Path, text: str | None) -> tuple[Manifest | None, Path | None]:
    """The record of what install wrote for `host` into `config`, and where it is: this home's,
    else the one our block in the user's file (`text`) names, when that is a record of this host."""
    for path in (manifest_path(host, config), _legacy_manifest_path(host)):
        mine = _load(path)
        if mine is not None and mine.config == str(config):
            return mine, path
    named = marked.recorded(text or "")
    if named is None:
        return None, None
    try:
        theirs = _load(Path(named))
    except UserError:
        return None, None  # not a record we can read: the block alone is taken out
    # a block copied from another file names that file's record: not this install's
    ours = theirs is not None and theirs.host == host and theirs.config == str(config)
    return (theirs, Path(named)) if ours else (None, None)


def _shipped(wiring: Wiring) -> list[Placed]:
    """With no record anywhere, our files are those exactly as this package ships them."""
    return [Placed(path=str(path), sha256=sha256(body)) for path, body in wiring.files.items()]


def _forget(record: Path) -> None:
    record.unlink(missing_ok=True)
    _remove_if_empty(record.parent)


def _load(path: Path) -> Manifest | None:
    try:
        return Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError as exc:
        raise UserError(f"{path} is damaged ({exc}); delete it and run the command again (with no record, "
                        "uninstall takes out our marked block and our files as this package ships them)") from None
