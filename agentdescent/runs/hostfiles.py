"""What a host is sent of a candidate artifact: its workspace's files, the candidates a host
conversation already met (`Seen`), and a group's parts fitted to one page (`fitted`).

A candidate's parts can be as large as the artifact (a 50 KB prompt file, a skill folder's
files, or hundreds of small ones); a host that cuts a long tool result would lose the request
ids after them. So a group too large for its page sends its smallest files and names its largest
as `unsent` (the host reads them in the workspace), and a text, a template or a list of paths past
the page as a file of the run's folder whose path it gives (`context_file`, `template_file`,
`unsent_file`, `deleted_file`: a list's file holds one path a line), which the host reads with its
own file tools.

Left out: the requests themselves and the page's other groups (`hostwork`).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Protocol

import pydantic_core

from agentdescent import atomic
from agentdescent.quoting import UNSHOWN
from agentdescent.runs.mailbox import Claim
from agentdescent.runs.store import RunDir
from agentdescent.walking import entries

__all__ = ["FILE_BYTES", "SKILL_FOLDERS", "Seen", "fitted", "sent_bytes", "sent_text", "workspace_files"]

FILE_BYTES = 200_000  # a workspace file past this is read by the host itself, not sent
SKILL_FOLDERS = (".claude", ".agents", ".codex")  # hidden folders a host reads skills from
SPILLED = "host-files"  # the run's folder for texts too long to send
LIST_BYTES = 1_000  # a list of paths past this, in a group too large for its page, is read in a file: the page holds files


class Group(Protocol):
    """The parts of a candidate's group that `fitted` may move out of the page."""

    candidate: str
    files: dict[str, str] | None
    deleted: list[str] | None
    deleted_file: str | None
    unsent: list[str] | None
    unsent_file: str | None
    context: str | None
    context_file: str | None
    template: str | None
    template_file: str | None


def sent_text(answer: Any) -> str:
    """`answer` as a host receives it in a tool's result: compact JSON (the MCP server sends every
    result so, and pages are measured in it), each control or invisible character JSON leaves as
    it is (a C1 CSI, a bidi override, a zero-width space) written as its `\\u` escape: the same
    value, and nothing a host's terminal acts on or hides."""
    return UNSHOWN.sub(_json_escape, pydantic_core.to_json(answer).decode())


def sent_bytes(answer: Any) -> int:
    """The UTF-8 bytes of `sent_text(answer)`."""
    return len(sent_text(answer).encode())


def _json_escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # past the first plane, JSON writes a character as its UTF-16 pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def fitted(group: Group, run: RunDir, room: int) -> Group:
    """`group` (changed in place) with its JSON within `room` bytes where moving its parts out can
    do it: as many of its smallest files as fit, the others named in `unsent` (a list past
    `LIST_BYTES` in a file, as a long `deleted` is), then its context out, then its template."""
    if sent_bytes(group) > room and (group.files or group.unsent or group.deleted):
        _files_fitted(group, run, room)
    if sent_bytes(group) > room and group.context:
        group.context_file, group.context = _spilled(run, f"context-{group.candidate}", group.context), None
    if sent_bytes(group) > room and group.template:
        group.template_file, group.template = _spilled(run, f"template-{_digest(group.template)}", group.template), None
    return group


def _files_fitted(group: Group, run: RunDir, room: int) -> None:
    """`group` keeping the most of its smallest files that fit in `room` (none, when none do): a page
    is a size measured as sent, which grows with the files kept, so the count is searched."""
    whole, unsent, deleted = group.files, list(group.unsent or ()), group.deleted
    files = sorted((whole or {}).items(), key=lambda item: len(item[1]))

    def keep(count: int, write: bool = False) -> None:
        group.files = dict(files[:count]) if count or whole == {} else None
        group.unsent, group.unsent_file = _listed(run, "unsent", sorted([*unsent, *(p for p, _ in files[count:])]), write)
        group.deleted, group.deleted_file = _listed(run, "deleted", deleted, write)

    low, high = 0, len(files)
    while low < high:
        middle = (low + high + 1) // 2
        keep(middle)
        low, high = (middle, high) if sent_bytes(group) <= room else (low, middle - 1)
    keep(low, write=True)


def _listed(run: RunDir, name: str, paths: list[str] | None, write: bool) -> tuple[list[str] | None, str | None]:
    """(`paths`, None) when their JSON is within `LIST_BYTES`, else (None, the file of the run's
    folder that holds them one a line), written if `write`."""
    if not paths or sent_bytes(paths) <= LIST_BYTES:
        return paths or None, None
    text = "".join(f"{path}\n" for path in paths)
    name = f"{name}-{_digest(text)}"
    return None, _spilled(run, name, text) if write else str(_spill_path(run, name))


def _spill_path(run: RunDir, name: str) -> Path:
    return run.file(SPILLED) / f"{name}.txt"


def _spilled(run: RunDir, name: str, text: str) -> str:
    path = _spill_path(run, name)
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        atomic.write_text(path, text)
    return str(path)


def workspace_files(workspace: object) -> tuple[dict[str, str], list[str]]:
    """The text files of a workspace, by path, without its hidden folders but the skill layouts'
    (`.claude`, `.agents`, `.codex`): what a host would read there; and the paths of the others
    (not text, or past `FILE_BYTES`), which the host reads there if a task needs them."""
    if not isinstance(workspace, str):
        return {}, []
    root, found, unsent = Path(workspace), {}, []
    try:
        for path in sorted(entries(root)):
            relative = path.relative_to(root)
            hidden = [part for part in relative.parts[:-1] if part.startswith(".")]
            if not path.is_file() or path.is_symlink() or any(p not in SKILL_FOLDERS for p in hidden[:1]):
                continue
            data = path.read_bytes() if path.stat().st_size <= FILE_BYTES else None
            text = _text_of(data) if data is not None else None
            if text is None:
                unsent.append(str(relative))
            else:
                found[str(relative)] = text
    except OSError:
        return {}, []
    return found, unsent


def _text_of(data: bytes) -> str | None:
    """`data` as UTF-8 text, or None for bytes that are not (a NUL, an invalid sequence)."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Seen:
    """The candidates one kind of work of a holder was sent, each with a digest of the files it
    was sent, kept beside the mailbox for its later calls: a candidate met again comes as its id,
    a new one near a known one as the files that differ. Kept by kind: a conversation's rollout
    helper and its reflection helper share one holder, and each must be sent what it reads."""

    KEPT = 32  # candidates whose file digests are kept to send a new one against

    def __init__(self, run: RunDir, holder: Claim, kind: str, *, forget: bool = False) -> None:
        """`forget`: what was sent before is not known to the caller (a helper that just started)."""
        safe = holder.holder.isalnum() and kind.isalnum()
        self.path = run.file("mailbox") / f"seen-{holder.holder}-{kind}.json" if safe else None
        self._known: dict[str, dict[str, str]] = {}
        self._added = forget  # saved empty, or with what this call sends
        if self.path is not None and not forget:
            try:
                known = json.loads(self.path.read_text(encoding="utf-8"))
                self._known = {str(c): {str(p): str(d) for p, d in files.items()} for c, files in known.items()}
            except (OSError, ValueError, TypeError, AttributeError):
                pass

    def __contains__(self, candidate: str) -> bool:
        return candidate in self._known

    def add(self, candidate: str, files: dict[str, str] | None) -> None:
        self._known[candidate] = {path: _digest(text) for path, text in (files or {}).items()}
        while len(self._known) > self.KEPT:
            del self._known[next(iter(self._known))]
        self._added = True

    def against(self, files: dict[str, str]) -> tuple[str | None, dict[str, str], list[str] | None]:
        """(base, the files that differ from base's, base's files not in `files`) for the known
        candidate nearest `files`; (None, files, None) when none is nearer than nothing."""
        digests = {path: _digest(text) for path, text in files.items()}
        best: tuple[int, str, dict[str, str], list[str]] | None = None
        for candidate, known in self._known.items():
            if not known:
                continue
            changed = {p: files[p] for p, d in digests.items() if known.get(p) != d}
            deleted = sorted(set(known) - set(files))
            size = sum(len(t) for t in changed.values()) + sum(len(p) for p in deleted)
            if best is None or size < best[0]:
                best = (size, candidate, changed, deleted)
        if best is None or best[0] >= sum(len(t) for t in files.values()):
            return None, files, None
        return best[1], best[2], best[3]

    def save(self) -> None:
        if self._added and self.path is not None:
            atomic.write_text(self.path, json.dumps(self._known))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
