"""A folder two processes talk through: one asks and waits, the other claims a request and answers it.

    <folder>/<id>.request.json   what is asked: {"id", "kind", "created", "body"}
    <folder>/<id>.claim          who took it, and when: {"holder", "pid", "time"} (a lease: a claim
                                 older than it, or whose holder's process is gone, is void)
    <folder>/<id>.answer.json    the answer, created once (a second answer is refused)
    <folder>/<id>.withdrawn      why a request went unanswered (its asker's timeout ran out), kept
                                 WITHDRAWN_KEPT_S so that a late answer is refused saying why

The run's process asks (a rollout for the host to do, a reflection, an approval) and waits with a
timeout; the MCP server or the CLI, in another process, lists what is open, claims and answers.
Every file is written whole (atomic rename, or a hard link for a claim and an answer, which fails
when one is there), so neither side ever reads half of one, and whatever a file holds is checked before
use. Left out: what the bodies mean (`host`), and who may answer (anyone who can write the folder).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agentdescent import atomic
from agentdescent.errors import AgentError, UserError

POLL_SECONDS = 0.05
WITHDRAWN_KEPT_S = 3600.0  # a late answer within this long is told why its request went; later, that it is gone


class Request(BaseModel):
    id: str
    kind: str
    created: float
    body: dict[str, Any]


class Claim(BaseModel):
    """Who took a request: a holder (one host session, say), its process when that outlives the
    claim (an MCP server does; a command line does not), and when it last held it."""

    holder: str = ""
    pid: int | None = Field(default=None, ge=1)
    time: float = 0.0

    def void(self, lease: float, now: float) -> bool:
        """Whether the claim no longer holds: its lease ran out, or its holder's process is gone."""
        return now - self.time >= lease or (self.pid is not None and not _alive(self.pid))


class Mailbox:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    # the asking side

    def ask(self, kind: str, body: dict[str, Any], *, timeout: float, gone: Callable[[], bool] = lambda: False,
            posted: Callable[[], None] = lambda: None, limit: str | None = None, request_id: str | None = None) -> dict:
        """Post a request (then call `posted`) and wait for its answer; `AgentError` after `timeout`
        seconds, or as soon as `gone()` says nobody will answer any more (a cancelled run). Either
        way the request is withdrawn; after a timeout, a late answer is refused naming `limit`, what
        the timeout stands for ("host_timeout=1800 s"). `request_id`: the id the asker already
        calls it by (letters and digits, never reused)."""
        if request_id is not None and not _safe_id(request_id):
            raise UserError(f"a request id is 1 to 32 letters and digits, not {request_id!r}")
        request = Request(id=request_id or secrets.token_hex(6), kind=kind, created=time.time(), body=body)
        self.folder.mkdir(exist_ok=True)  # inside its run's folder, never made here: a deleted run stays deleted
        atomic.write_text(self._path(request.id, "request.json"), request.model_dump_json())
        posted()
        deadline, why = time.monotonic() + timeout, None
        try:
            while time.monotonic() < deadline and not gone():
                answer = self._read(self._path(request.id, "answer.json"))
                if answer is not None:
                    return answer
                time.sleep(POLL_SECONDS)
            why = None if gone() else f"no answer within {limit or f'{timeout:g} s'}"  # stopping: the run's state says so
        finally:
            self._remove(request.id, why)
        raise AgentError(f"no answer to {kind} request {request.id} within {timeout:g} s"
                         if not gone() else f"the {kind} request {request.id} was withdrawn: the run is stopping")

    def clear(self) -> int:
        """Withdraw every request, and forget why earlier ones went (a run starting again or ending:
        nobody waits for them, and an answer to any is refused as the run's state says); how many."""
        requests = list(self.folder.glob("*.request.json")) if self.folder.is_dir() else []
        for path in requests:
            self._remove(path.name.split(".")[0])
        for path in self.folder.glob("*.withdrawn") if self.folder.is_dir() else []:
            path.unlink(missing_ok=True)
        return len(requests)

    # the answering side

    def open(self, kind: str | None = None) -> list[tuple[Request, Claim | None]]:
        """Requests not yet answered, oldest first, with the claim on each (None: free)."""
        found = []
        for path in self.folder.glob("*.request.json") if self.folder.is_dir() else []:
            try:
                request = Request.model_validate_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, ValidationError):
                continue  # withdrawn while we looked, or not ours
            if (kind is None or request.kind == kind) and not self._path(request.id, "answer.json").exists():
                found.append((request, self._claimed(request.id)))
        return sorted(found, key=lambda pair: pair[0].created)

    def claim(self, request_id: str, *, holder: Claim, lease: float) -> bool:
        """Take a request for `holder`; False when a claim on it still holds, the holder's own
        included: two calls of one conversation at once must not both be handed it. A claim whose
        lease ran out, or whose process is gone, is void: the request goes back to the queue, and
        of two takers at once one gets it (a void claim is replaced under the claims' lock)."""
        path = self._path(request_id, "claim")
        with self._claims_locked():
            claimed, now = self._claimed(request_id), time.time()
            if claimed is not None and not claimed.void(lease, now):
                return False
            if claimed is not None:
                path.unlink(missing_ok=True)
            if not self._link(path, holder.model_copy(update={"time": now}).model_dump_json()):
                return False
        if not self._path(request_id, "request.json").exists() or self._path(request_id, "answer.json").exists():
            path.unlink(missing_ok=True)  # answered and withdrawn between the listing and the claim
            return False
        return True

    def renew(self, holder: Claim, listing: list[tuple[Request, Claim | None]] | None = None) -> int:
        """Hold every claim of `holder` for a new lease (it is still at work); how many. `listing`:
        what `open()` just returned, so that a caller who read it does not read it again."""
        held = self._held(holder, self.open() if listing is None else listing)
        renewed = 0
        with self._claims_locked():
            for request, _ in held:
                claimed = self._claimed(request.id)  # still its own: another may have taken it since it went void
                if claimed is not None and claimed.holder == holder.holder:
                    atomic.write_text(self._path(request.id, "claim"),
                                      claimed.model_copy(update={"time": time.time()}).model_dump_json())
                    renewed += 1
        return renewed

    def release(self, holder: Claim, listing: list[tuple[Request, Claim | None]] | None = None) -> int:
        """Give back every request `holder` took and did not answer (of `listing`, as `renew`
        reads it: a caller gives back one kind's); how many."""
        held = self._held(holder, self.open() if listing is None else listing)
        released = 0
        with self._claims_locked():
            for request, _ in held:
                claimed = self._claimed(request.id)
                if claimed is not None and claimed.holder == holder.holder:
                    self._path(request.id, "claim").unlink(missing_ok=True)
                    released += 1
        return released

    def holds(self, holder: Claim, listing: list[tuple[Request, Claim | None]], *, lease: float) -> set[str]:
        """The ids of `listing` whose claim by `holder` still holds (a void one is back in the
        queue, for its holder's next take as for any other's)."""
        now = time.time()
        return {request.id for request, claimed in self._held(holder, listing) if not claimed.void(lease, now)}

    @staticmethod
    def _held(holder: Claim, listing: list[tuple[Request, Claim | None]]) -> list[tuple[Request, Claim]]:
        return [(request, claimed) for request, claimed in listing if claimed is not None and claimed.holder == holder.holder]

    def answer(self, request_id: str, body: dict[str, Any], *, kinds: tuple[str, ...] | None = None) -> None:
        """Answer a request once; `UserError` for an unknown or withdrawn one, a second answer, or
        (with `kinds`) one of another kind (an approval is a person's to answer, not a helper's)."""
        with self._claims_locked():  # not between a withdrawal's removals: its answer would be taken for one
            request = self._request(request_id) if _safe_id(request_id) else None
            withdrawn = self._withdrawn(request_id) if request is None and _safe_id(request_id) else None
            if withdrawn is not None:
                raise UserError(f"the request was withdrawn unanswered ({withdrawn}): nothing waits for this answer any "
                                "more; ask for the open ones again")
            if request is None:
                raise UserError("there is no such open request (it was answered, withdrawn when the run stopped, or "
                                "never existed); ask for the open ones again")
            if kinds is not None and request.kind not in kinds:
                raise UserError(f"it is a request of kind {request.kind!r}, not one a helper answers ({', '.join(kinds)}): "
                                "a person answers an approval, with accept or reject and its change id")
            if not self._link(self._path(request_id, "answer.json"), json.dumps(body)):
                raise UserError("the request was already answered; each is answered once")

    def _request(self, request_id: str) -> Request | None:
        try:
            return Request.model_validate_json(self._path(request_id, "request.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            return None

    @contextlib.contextmanager
    def _claims_locked(self) -> Iterator[None]:
        """Held while a claim is read and replaced: processes taking work at once take turns."""
        self.folder.mkdir(exist_ok=True)  # inside its run's folder, never made here: a deleted run stays deleted
        fd = os.open(self.folder / ".claims.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _link(self, final: Path, text: str) -> bool:
        """Write `final` whole unless it is there already (False): a reader never sees it half written."""
        temp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
        temp.write_text(text, encoding="utf-8")
        try:
            os.link(temp, final)
        except FileExistsError:
            return False
        finally:
            temp.unlink(missing_ok=True)
        return True

    def _path(self, request_id: str, suffix: str) -> Path:
        return self.folder / f"{request_id}.{suffix}"

    def holder_of(self, request_id: str) -> str | None:
        """Who holds a request's claim, void or not (None: nobody)."""
        claimed = self._claimed(request_id)
        return None if claimed is None else claimed.holder

    def _claimed(self, request_id: str) -> Claim | None:
        try:
            return Claim.model_validate_json(self._path(request_id, "claim").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return Claim()  # unreadable: void at once

    def _read(self, path: Path) -> dict | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # an answer that is not JSON: an empty one, which its reader refuses
        return data if isinstance(data, dict) else {}

    def _withdrawn(self, request_id: str) -> str | None:
        """Why a request was withdrawn unanswered, while that is kept (None: not known)."""
        try:
            return self._path(request_id, "withdrawn").read_text(encoding="utf-8")[:500] or None
        except (OSError, ValueError):
            return None

    def _remove(self, request_id: str, why: str | None = None) -> None:
        """Withdraw a request and all it holds, under the lock an answer is given under; `why` (it
        went unanswered) is kept for a late answer, and the reasons kept past their time go."""
        if not self.folder.is_dir():  # its run's folder deleted: nothing left to withdraw
            return
        with self._claims_locked():
            if why is not None:
                atomic.write_text(self._path(request_id, "withdrawn"), why)
            for suffix in ("request.json", "claim", "answer.json"):
                self._path(request_id, suffix).unlink(missing_ok=True)
        if why is not None:
            for path in self.folder.glob("*.withdrawn"):
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > WITHDRAWN_KEPT_S:
                        path.unlink()


def _alive(pid: int) -> bool:
    """Whether a process of this machine has `pid` (one we may not signal is alive too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _safe_id(request_id: str) -> bool:
    return isinstance(request_id, str) and 0 < len(request_id) <= 32 and request_id.isalnum()
