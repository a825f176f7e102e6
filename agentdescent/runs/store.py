"""The run store: one folder per run, under `$AGENTDESCENT_HOME/runs` (default `~/.agentdescent/runs`).

    <id>/made.json       the run's number in the order the store's runs were made (`order`: which is the latest)
    <id>/spec.json       the checked spec (absolute paths; a spec never holds a key)
    <id>/tasks.jsonl     the tasks as they were when the run was started (a resumed run reads these)
    <id>/target.json     the target's content when the run was started (a resumed run reads it)
    <id>/assets.json     a folder target's files that are not text, base64 by path (where it has any)
    <id>/executable.json a folder target's files with an execute bit, by path (where it has any)
    <id>/sealed.json     a digest of each file above as the run was made (`sealed`: changed since, it is damage)
    <id>/status.json     where the run is, rewritten atomically as it goes (another run's is damage)
    <id>/events.jsonl    every progress event, one JSON object a line
    <id>/ledger/         the git ledger, with the run's checkpoint and rollout journal inside
    <id>/result.json     the result, once the run has ended
    <id>/run.log         what the run's process and its programs printed, redacted (`runlog`)
    <id>/lock            locked (flock) by the run's process for as long as it lives
    <id>/mailbox/        host-driven rollouts, reflections and approvals waiting for an answer
    <id>/accepted.json   the last write-back's answer, every list whole (`verdict`)
    <id>/accept.lock     held while `accept` writes back, so that two accepts never interleave
    <id>/resume.lock     held while `resume` starts the run's process again, so that two never both do

A lock the kernel holds for a live process is the one liveness test that survives a SIGKILL and a
reboot alike: a run whose status says running but whose lock is free is `interrupted`, and so is one
whose lock a program it started holds after its process is gone (the pid and start the status
names are no longer a process: `procscan.is_running`). Runs never share a file, so two runs in one
store never interfere. Only `create` makes a run's folder: a run's files are written into it
(`write`), so a folder deleted or moved away is not made again.
Left out: what runs do (the runner), and where their rollouts work (`rolloutdir`: away from the tasks' answers).
"""

from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

from agentdescent import atomic, procscan, reading
from agentdescent.errors import UserError
from agentdescent.home import HOME_ENV, home
from agentdescent.quoting import quoted
from agentdescent.runs import checkpointed, ontarget, order, sealed
from agentdescent.runs.spec import RunSpec
from agentdescent.runs.status import RunStatus
from agentdescent.types import Task

__all__ = ["HOME_ENV", "RUN_ENV", "RUN_FOLDER_ENV", "RunDir", "RunStore", "home"]

ASSETS = "assets.json"  # a folder target's files that are not text, base64 by path
EXECUTABLE = "executable.json"  # a folder target's files with an execute bit, by path
FILE_BYTES = 4 << 20  # a run's status, spec, lock or origin: far past what one holds
DATA_BYTES = 256 << 20  # a run's tasks, target, assets, result or events
T = TypeVar("T")
RESUMABLE = ("interrupted", "cancelled", "failed")  # the states `resume` takes up
RUN_ENV = "AGENTDESCENT_RUN"  # set in a run's process, and so in every agent it starts: the run's id
RUN_FOLDER_ENV = "AGENTDESCENT_RUN_FOLDER"  # and its folder, which marks a program as this run's: a copy shares the id


class RunDir:
    """One run's folder and the files in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = path.name
        self._spec: RunSpec | None = None  # read once: written as the run is made, never again (sealed)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def ledger(self) -> Path:
        return self.path / "ledger"

    def text(self, name: str, limit: int = FILE_BYTES) -> str:
        """The run's file `name`: a regular file of at most `limit` bytes of UTF-8, read without
        following a symlink or waiting on a FIFO; `UserError` naming the damage when it is not
        (`FileNotFoundError` when it is not there: not written yet)."""
        try:
            fd = self._open(name, os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self.damaged(name, f"unreadable ({exc.strerror or exc})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
                raise self.damaged(name, f"{info.st_size:,} bytes, over the {limit:,} it may hold"
                                   if stat.S_ISREG(info.st_mode) else "not a regular file (a FIFO, a device?)")
            chunks, size = [], 0
            while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if size > limit:  # it grew while read
            raise self.damaged(name, f"over the {limit:,} bytes it may hold")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.damaged(name, "not UTF-8 text") from None

    def appending(self, name: str, *, binary: bool = False) -> IO:
        """The run's file `name` opened to append to (made if need be), never through a symlink."""
        fd = self._open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise self.damaged(name, "not a regular file (a FIFO, a device?)")
        return os.fdopen(fd, "ab") if binary else os.fdopen(fd, "a", encoding="utf-8")

    def _open(self, name: str, flags: int) -> int:
        """The run's file `name` opened with `flags`, never through a symlink nor waiting on a FIFO:
        either is damage (`UserError`); any other `OSError` is the caller's to say."""
        try:
            return os.open(self.file(name), flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO nobody reads
                raise self.damaged(name, "a symlink" if exc.errno == errno.ELOOP else "a FIFO") from None
            raise

    def parsed(self, name: str, parse: Callable[[str], T], limit: int = FILE_BYTES) -> T:
        """`parse` of the run's file `name` (`text`); a file that does not hold what the run wrote
        there is damage (`UserError`), and one not there a `FileNotFoundError`."""
        text = self.text(name, limit)
        try:
            return parse(text)
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
            first = str(exc).strip().splitlines()[:2]
            raise self.damaged(name, f"not what the run wrote ({' '.join(first)[:200]})") from None

    def damaged(self, name: str, why: str) -> UserError:
        """The error for a file of the run that is not what the run wrote."""
        return UserError(f"run {self.id} is damaged: its {name} is {why}, which AgentDescent never writes; "
                         f"something else changed {self.path}: move that folder out of the store to go on")

    def spec(self) -> RunSpec:
        if self._spec is None:
            self._spec = self.needed("spec.json", RunSpec.model_validate_json)
        return self._spec

    def tasks(self) -> list[Task]:
        return self.needed("tasks.jsonl", lambda text: [Task.model_validate_json(line) for line in text.split("\n")
                                                        if line.strip()], DATA_BYTES)

    def needed(self, name: str, parse: Callable[[str], T], limit: int = FILE_BYTES) -> T:
        """`parsed`, for a file every run has: one not there is damage too (`UserError`)."""
        try:
            return self.parsed(name, parse, limit)
        except FileNotFoundError:
            raise self.damaged(name, "missing") from None

    def assets(self) -> dict[str, bytes]:
        """The target folder's files that are not text, as the run read them (none for most runs)."""
        try:
            return self.parsed(ASSETS, lambda text: {key: base64.b64decode(data) for key, data in json.loads(text).items()},
                               DATA_BYTES)
        except FileNotFoundError:
            return {}

    def executable(self) -> frozenset[str]:
        """The target folder's files with an execute bit, as the run read them (none for most runs)."""
        try:
            paths = self.json(EXECUTABLE)
        except FileNotFoundError:
            return frozenset()
        return frozenset(path for path in paths if isinstance(path, str)) if isinstance(paths, list) else frozenset()

    def json(self, name: str, limit: int = DATA_BYTES) -> object:
        """The run's file `name` read as JSON (`parsed`)."""
        return self.parsed(name, json.loads, limit)

    def status(self, readings: ontarget.Readings | None = None) -> RunStatus:
        """The status as last written (`recorded`), with what its target holds now said
        (`ontarget`, through a listing's `readings`): a write-back or restore under way or cut
        short, a version taken away or put back since."""
        return ontarget.as_on_target(self.id, self.recorded(), readings)

    def recorded(self) -> RunStatus:
        """The status as last written, with `interrupted` for a run whose process is gone: what a
        writer of the status builds on, never a reading of the target."""
        status = self._read_status()
        if status.state in ("starting", "running") and not self._lives(status):
            # The process writes its last status before it lets go of the lock: read again, or a
            # run that ended between the read and the lock check would look interrupted.
            status = self._read_status()
            if status.state in ("starting", "running") and not self._lives(status):
                status = checkpointed.interrupted(self, status)
        if status.state in RESUMABLE:  # a resume would refuse it: say so now, not after `next` advised one
            try:
                sealed.check(self)
            except UserError as exc:
                return status.model_copy(update={"error": str(exc), "next": "it cannot be resumed: start a new run "
                                                 "with agentdescent evolve SPEC"})
            lost = checkpointed.lost(self, status)
            if lost:
                return status.model_copy(update={"error": lost, "next": f"it cannot be resumed: {checkpointed.instead(self)}"})
        return status

    def _lives(self, status: RunStatus) -> bool:
        """Whether the run's process lives: its lock is held, and by the process its status names (one
        that has not written its pid yet is taken on the lock's word). A process forked without exec
        holds the lock too, and may outlive it."""
        return self.alive() and (status.pid is None or procscan.is_running(status.pid, status.pid_start))

    def _read_status(self) -> RunStatus:
        try:
            status = self.parsed("status.json", RunStatus.model_validate_json)
        except FileNotFoundError:
            raise self.damaged("status.json", "missing") from None
        sealed.own(self, status)
        return status

    def write(self, name: str, text: str) -> None:
        """The run's file `name` written atomically in its folder, which only the store's `create`
        makes: `FileNotFoundError` when the folder is gone (deleted, or moved out of the store)."""
        atomic.write_text_in(self.path, name, text)

    def write_status(self, status: RunStatus) -> None:
        """Atomically (`write`); on a full disk, where a new file cannot be made, over the old one
        in place (its blocks are freed first), so that the run can still say why it stopped."""
        text = status.model_dump_json(indent=1)
        try:
            self.write("status.json", text)
        except OSError:  # its folder gone, the file below is gone too: FileNotFoundError again
            with self.file("status.json").open("r+", encoding="utf-8") as handle:
                handle.truncate(0)
                handle.write(text)

    def alive(self) -> bool:
        """Whether a process holds the run's lock (its runner is alive)."""
        try:
            fd = self._open("lock", os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self.damaged("lock", f"unreadable ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops our shared lock, if we got it
        return False

    def lock(self, name: str = "lock", busy: str = "") -> int:
        """Take the lock file `name`; the open descriptor that holds it (closing it lets go).
        `UserError` when another process holds it."""
        try:
            fd = self._open(name, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise _unwritable_store(self.path.parent, exc, f"take the lock {self.file(name)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(busy or f"run {self.id} is already running in another process") from None
        return fd

    @contextmanager
    def holding(self, name: str, busy: str) -> Iterator[int]:
        """Hold the lock file `name` for the block; `UserError(busy)` when another process has it."""
        fd = self.lock(name, busy)
        try:
            yield fd
        finally:
            os.close(fd)


def stored_tasks(tasks: list[Task]) -> str:
    """The tasks as a run keeps them (its tasks.jsonl); `UserError` when that passes `DATA_BYTES`,
    which a run reads back no more than (JSON spells a control character in six bytes)."""
    text = "".join(task.model_dump_json() + "\n" for task in tasks)
    size = len(text.encode("utf-8"))
    if size > DATA_BYTES:
        raise UserError(f"the {len(tasks):,} tasks come to {size:,} bytes as a run keeps them (JSON, where a control "
                        f"character takes six bytes), over the {DATA_BYTES:,} a run's file may hold; use fewer or shorter "
                        "tasks (tasks: {limit: N} keeps the first N), or take the control characters out of them")
    return text


def _unwritable_store(root: Path, exc: OSError, doing: str = "") -> UserError:
    """Why the store at `root` cannot be written, and the fix; `doing` is what was refused (default: a new run)."""
    doing = doing or f"create a run in {root}"
    if exc.errno == errno.ENOTDIR:  # the home, or its runs folder, is a file
        return UserError(f"cannot {doing}: a file stands where a folder must be ({exc.filename}); "
                         f"set {HOME_ENV} to a folder, or move that file away")
    if exc.errno == errno.EROFS:
        return UserError(f"cannot {doing}: the run store {root} is on a read-only file system; mount it writable, "
                         f"or set {HOME_ENV} to a writable folder")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return UserError(f"cannot {doing}: {exc.strerror}; free some space on the disk of {root}, or set {HOME_ENV} "
                         "to a folder on another")
    return UserError(f"cannot {doing}: {exc.strerror or exc}; make {root} writable, or set {HOME_ENV} to a "
                     "writable folder")


class RunStore:
    """The folder of all runs; `create` makes a run's folder, `get` finds one by id (or a unique prefix)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else home() / "runs"

    def folder(self, name: str) -> Path:
        """A folder of the store's own (made if need be); `UserError` when the store is not writable."""
        try:
            path = self.root / name
            path.mkdir(parents=True, exist_ok=True)
            return path
        except OSError as exc:
            raise _unwritable_store(self.root, exc) from None

    def create(self, spec: RunSpec, tasks: list[Task], content: str | dict[str, str], status: RunStatus,
               assets: Mapping[str, bytes] | None = None, executable: Iterable[str] = ()) -> RunDir:
        """A new run's folder with its number (`order`), its spec, its tasks, its target's content (and
        the files of a folder that are not text, `assets`, and those with an execute bit) and its first status."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            while True:
                path = self.root / f"{_slug(Path(spec.target).stem)}-{secrets.token_hex(3)}"
                try:
                    path.mkdir()
                    break
                except FileExistsError:
                    continue
        except OSError as exc:
            raise _unwritable_store(self.root, exc) from None
        run = RunDir(path)
        try:
            order.number(run, self.all())
            atomic.write_text(run.file("spec.json"), spec.model_dump_json(indent=1))
            atomic.write_text(run.file("tasks.jsonl"), stored_tasks(tasks))
            atomic.write_text(run.file("target.json"), json.dumps(content, ensure_ascii=False))
            if assets:
                atomic.write_text(run.file(ASSETS), json.dumps({k: base64.b64encode(v).decode("ascii")
                                                                for k, v in assets.items()}))
            if executable:
                atomic.write_text(run.file(EXECUTABLE), json.dumps(sorted(executable), ensure_ascii=False))
            sealed.seal(run)
            run.write_status(status.model_copy(update={"id": run.id}))
        except BaseException as exc:
            # a folder without its status is no run: nothing lists, resumes or prunes it
            shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, OSError):
                raise UserError(f"cannot write run {run.id} in {self.root}: {exc.strerror or exc}; free some space or "
                                f"set {HOME_ENV} to a writable folder") from None
            raise
        return run

    def get(self, run_id: str) -> RunDir:
        runs = self.all()
        exact = [r for r in runs if r.id == run_id]
        found = exact or [r for r in runs if isinstance(run_id, str) and run_id and r.id.startswith(run_id)]
        if len(found) == 1:
            return found[0]
        known = ", ".join(r.id for r in runs[-10:]) or "none yet"
        # RUN as typed may be anything (a pasted page, a variable's text): only an id-like one is echoed as it is
        shown = repr(run_id) if reading.looks_like_a_name(run_id) else quoted(run_id, 60)
        if found:
            more = f" and {len(found) - 5} more" if len(found) > 5 else ""
            raise UserError(f"{shown} matches {len(found)} runs ({', '.join(r.id for r in found[:5])}{more}); give more "
                            "of the id")
        raise UserError(f"no run {shown} in {self.root}; the latest runs: {known}")

    def all(self) -> list[RunDir]:
        """Every run, oldest first (in the order they were made: `order`); `UserError` when something
        that is not a folder stands on the way to the store (no run could ever be there)."""
        if not self.root.is_dir():
            blocked = next((p for p in [self.root, *self.root.parents] if p.exists() and not p.is_dir()), None)
            if blocked is not None:
                raise UserError(f"the run store {self.root} cannot be: {blocked} is a file, not a folder; set "
                                f"{HOME_ENV} to a folder")
            return []
        # a folder with a status, or a ledger (its status lost: listed as damaged, never hidden with its commits)
        runs = [RunDir(p) for p in self.root.iterdir() if _RUN_ID.fullmatch(p.name) and not p.is_symlink() and p.is_dir()
                and (os.path.lexists(p / "status.json") or os.path.lexists(p / "ledger"))]
        return sorted(runs, key=order.key)


_RUN_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")  # what `create` names a run's folder; any other folder is not a run


def _slug(name: str) -> str:
    """A short file-name-safe word for a run id. _slug("My Skill!") == "my-skill" """
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:32] or "run"
