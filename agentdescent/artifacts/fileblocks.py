"""How a folder's proposal is read: `<file path="...">text</file>` and `<delete path="..."/>`
blocks, each path as the key of the file it names in the folder.

    parse_file_blocks('<file path="a.md">\\nhi\\n</file><delete path="b.md"/>') == {"a.md": "hi\\n", "b.md": None}
    files_of('<file path="./SKILL.md">x</file>', ["SKILL.md"]) == {"SKILL.md": "x"}

What a reply may hold: blocks and delete tags, with any prose between them. Everything from a
block's opening tag to its closing tag is the file's text, never a command: a delete tag or an
opening tag quoted there is text. A block ends at the first closing tag of its own name, so a
file whose text holds `</file>` is written `<file-N path="...">text</file-N>`, N a number whose
`</file-N>` the text does not hold (`file_block` picks it, `free_tag` for any tag). A reply that
such a text was cut in, or that stops inside a block, is `misread`, with the reason.

Proposals are model output: every reader here runs in time linear in the proposal, which has
passed the door (`governance.text.text_refusal`) before it comes here.
Left out: whether a path may be written (governance judges that, by name) and what the files hold.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from agentdescent.artifacts.workspace import LAYOUTS

# Where the workspace layouts put a folder: a path under one names the folder's own file.
_LAYOUT_PREFIX = re.compile("|".join(re.escape(folder).replace(re.escape("{name}"), r"(?!\.\.(?:/|$))[^/]+")
                                     for folder in LAYOUTS.values() if folder))  # a name, never ".."
_OPEN = re.compile(r'<(file(?:-[0-9]+)?|delete) path="')  # linear: a fixed start, then digits
_CLOSING = re.compile(r"</file(?:-[0-9]+)?>")
_CLOSE_DELETE = re.compile(r"\s*/>")  # linear: greedy blanks, then a fixed "/>"


def parse_file_blocks(proposal: str) -> dict[str, str | None]:
    """Read `<file path="p">text</file>` blocks (or `<file-N ...>text</file-N>`) and `<delete
    path="p"/>` tags: {path: text or None}.

    A path is the non-empty text up to the next quote; one newline after the opening tag is not
    content; a block ends at the first closing tag of its name, and what stands inside it is its
    text; a later block of a path wins, and a delete tag beats a block. A block no closing tag
    ends is not read, nor anything after it (`misread` says so).
    parse_file_blocks('<file path="a.md">\\nhi\\n</file><delete path="b.md"/>') == {"a.md": "hi\\n", "b.md": None}
    """
    blocks = _read(proposal).blocks
    files: dict[str, str | None] = {path: text for path, text, _ in blocks if text is not None}
    files.update((path, None) for path, text, _ in blocks if text is None)
    return files


def misread(proposal: str, shown: Mapping[str, str] | None = None) -> str | None:
    """Why `proposal` cannot be read as its writer meant, or None: a block no closing tag ends (a
    reply cut off: what came before may be only part of the change), a file of `shown` (the folder
    as the model saw it) whose text holds `</file>` given in a plain `<file>` block, which ends at
    its first one, or a closing tag outside any block (a file's text that holds one, cut there).
    misread('<file path="a.md">x</file> </file>') starts "the reply has a </file> outside any block" """
    reading = _read(proposal)
    if reading.unclosed is not None:
        path, tag = reading.unclosed
        return (f"the reply's block of {path[:80]} has no </{tag}>: the reply was cut off before its end (a model's "
                "output limit?) or the block was closed by another tag, so what came before may be only part of the "
                "change; none of it is used")
    shown = shown or {}
    known = set(shown)
    plain = {_as_key(path, known) for path, text, tag in reading.blocks if text is not None and tag == "file"}
    cut = next((key for key in sorted(plain) if "</file>" in shown.get(key, "")), None)
    if cut is not None:
        tag = free_tag("file", shown[cut])
        return (f"{cut[:80]} holds </file> in its text, so a <file> block of it ends at its first </file>; give it "
                f'as it was shown, <{tag} path="{cut[:80]}">its whole text</{tag}>')
    if reading.stray is not None:
        return (f"the reply has a {reading.stray} outside any block: a file's text that holds it was cut there; give "
                'such a file as <file-N path="...">its text</file-N>, N a number whose </file-N> the text does not hold')
    return None


def file_block(path: str, text: str) -> str:
    """The block that reads back as `text`: file_block("a.md", "x</file>\\n") == '<file-1 path="a.md">\\nx</file>\\n</file-1>'"""
    tag = free_tag("file", text)
    return f'<{tag} path="{path}">\n{text}</{tag}>'


def free_tag(name: str, *texts: str) -> str:
    """`name`, or `name-N` for the least N, whose closing tag none of `texts` holds.
    free_tag("file", "a </file> b") == "file-1" """
    if not any(f"</{name}>" in text for text in texts):
        return name
    taken = {number for text in texts for number in re.findall(rf"</{re.escape(name)}-([0-9]+)>", text)}
    return f"{name}-{next(n for n in itertools.count(1) if str(n) not in taken)}"


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


class _Reading(NamedTuple):
    blocks: list[tuple[str, str | None, str]]  # (path, text, tag) in order; a delete tag's text is None
    unclosed: tuple[str, str] | None  # the path and tag of a block no closing tag ends
    stray: str | None  # a closing tag that stands outside any block


def _read(text: str) -> _Reading:
    """One forward scan: each tag found, the text up to its end is skipped, so what a block holds is
    never read as a tag, and each stretch between blocks is searched once for a stray closing tag."""
    blocks: list[tuple[str, str | None, str]] = []
    stray: str | None = None
    gap = at = 0  # where the text outside any block resumes; where the next tag is looked for
    while opened := _OPEN.search(text, at):
        path, quote = _quoted(text, opened.end())
        if quote == -1:
            break  # no quote left: no later tag can end its path either
        tag = opened[1]
        if tag == "delete":
            closed = _CLOSE_DELETE.match(text, quote + 1) if path else None
            if closed is None:
                at = opened.start() + 1  # not a tag; one may start inside what was read
                continue
            blocks.append((path, None, tag))
            end = closed.end()
        else:
            if not path or not text.startswith(">", quote + 1):
                at = opened.start() + 1
                continue
            body = quote + 2 + text.startswith("\n", quote + 2)
            close = text.find(f"</{tag}>", body)
            if close == -1:
                return _Reading(blocks, (path, tag), stray or _stray(text, gap, opened.start()))
            blocks.append((path, text[body:close], tag))
            end = close + len(tag) + 3
        stray = stray or _stray(text, gap, opened.start())
        gap = at = end
    return _Reading(blocks, None, stray or _stray(text, gap, len(text)))


def _stray(text: str, start: int, end: int) -> str | None:
    found = _CLOSING.search(text, start, end)
    return found[0] if found else None
