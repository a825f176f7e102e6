"""How a folder's proposal is read: `<file path="...">text</file>` and `<delete path="..."/>`
blocks, each path as the key of the file it names in the folder.

    parse_file_blocks('<file path="a.md">\\nhi\\n</file><delete path="b.md"/>') == {"a.md": "hi\\n", "b.md": None}
    files_of('<file path="./SKILL.md">x</file>', ["SKILL.md"]) == {"SKILL.md": "x"}

Proposals are model output: every reader here runs in time linear in the proposal, which has
passed the door (`governance.text.text_refusal`) before it comes here.
Left out: whether a path may be written (governance judges that, by name) and what the files hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from agentdescent.artifacts.workspace import LAYOUTS

# Where the workspace layouts put a folder: a path under one names the folder's own file.
_LAYOUT_PREFIX = re.compile("|".join(re.escape(folder).replace(re.escape("{name}"), r"(?!\.\.(?:/|$))[^/]+")
                                     for folder in LAYOUTS.values() if folder))  # a name, never ".."
_OPEN_FILE, _CLOSE_FILE, _OPEN_DELETE = '<file path="', "</file>", '<delete path="'
_CLOSE_DELETE = re.compile(r"\s*/>")  # linear: greedy blanks, then a fixed "/>"


def parse_file_blocks(proposal: str) -> dict[str, str | None]:
    """Read `<file path="p">text</file>` and `<delete path="p"/>` blocks: {path: text or None}.

    A path is the non-empty text up to the next quote; one newline after the opening tag is not
    content; a block ends at the first `</file>`; a later block of a path wins, and a delete tag
    (read anywhere, inside a block too) beats a block. Linear time: each scan moves forward.
    parse_file_blocks('<file path="a.md">\\nhi\\n</file><delete path="b.md"/>') == {"a.md": "hi\\n", "b.md": None}
    """
    files: dict[str, str | None] = dict(_file_blocks(proposal))
    files.update((path, None) for path in _delete_tags(proposal))
    return files


def unclosed_file(proposal: str) -> str | None:
    """The path of a `<file path="...">` block that no `</file>` closes (a reply cut off before
    its end: `parse_file_blocks` reads nothing of it), or None.
    unclosed_file('<file path="a.md">\nhi\n</file><file path="b.md">\nhal') == "b.md" """
    last = proposal.rfind(_CLOSE_FILE)
    tail = proposal if last == -1 else proposal[last + len(_CLOSE_FILE):]
    return next((path for path, _ in _file_blocks(tail + _CLOSE_FILE)), None)


def files_of(proposal: str, known: Iterable[str]) -> dict[str, str | None]:
    """`parse_file_blocks`, each path as the folder's key: models write "./SKILL.md", or the path
    a host reads the folder at (".claude/skills/my-skill/SKILL.md"); where the rest names a file
    the folder has, that file is meant, and a new file there is the folder's new file (unless the
    folder holds a ".claude/skills/my-skill/" of its own). Any other path is kept for governance
    to judge, by name."""
    known = set(known)
    return {_as_key(path, known): text for path, text in parse_file_blocks(proposal).items()}


def _as_key(path: str, known: set[str]) -> str:
    """`path` without "." and empty segments, or the known key it names under a layout's folder,
    or, under a host's hidden layout folder (".claude/skills/<name>/") that the folder itself
    does not have, the new file it names there; an absolute path as it is (governance refuses it)."""
    if path.startswith("/"):
        return path
    parts = [part for part in path.split("/") if part not in ("", ".")]
    key = "/".join(parts)
    if key in known:
        return key
    under = [n for n in range(1, len(parts)) if _LAYOUT_PREFIX.fullmatch("/".join(parts[:n]))]
    for n in under:
        if "/".join(parts[n:]) in known:
            return "/".join(parts[n:])
    for n in under:  # a new file where a host reads the folder, which has no such folder of its own
        prefix = "/".join(parts[:n])
        if prefix.startswith(".") and not any(k.startswith(prefix + "/") for k in known):
            return "/".join(parts[n:])
    return key


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The text from `start` to the next quote and that quote's index; index -1 if none follows."""
    end = text.find('"', start)
    return (text[start:end], end) if end != -1 else ("", -1)


def _file_blocks(text: str) -> Iterator[tuple[str, str]]:
    at = text.find(_OPEN_FILE)
    while at != -1:
        path, quote = _quoted(text, at + len(_OPEN_FILE))
        if quote == -1:
            return  # no quote left: no later tag can end its path either
        if not path or not text.startswith(">", quote + 1):
            at = text.find(_OPEN_FILE, at + 1)  # not a tag; one may start inside what was read
            continue
        body = quote + 2 + text.startswith("\n", quote + 2)
        end = text.find(_CLOSE_FILE, body)
        if end == -1:
            return  # no </file> left: no later block can close, so none is searched for again
        yield path, text[body:end]
        at = text.find(_OPEN_FILE, end + len(_CLOSE_FILE))


def _delete_tags(text: str) -> Iterator[str]:
    at = text.find(_OPEN_DELETE)
    while at != -1:
        path, quote = _quoted(text, at + len(_OPEN_DELETE))
        if quote == -1:
            return
        closed = _CLOSE_DELETE.match(text, quote + 1) if path else None
        if closed:
            yield path
        at = text.find(_OPEN_DELETE, closed.end() if closed else at + 1)

