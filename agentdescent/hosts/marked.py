"""A block of ours inside a file a person owns, between two marker lines: put in once, taken out exactly.

    # >>> agentdescent: written by `agentdescent install codex`; ... removes it; record: ~/.agentdescent/hosts/codex.json
    ...our lines...
    # <<< agentdescent

`insert` appends the block (or replaces ours, when it is there already) and leaves every other
byte as it was; `remove` takes out the block and the one newline `insert` added before it, so
that an install followed by an uninstall gives the file back byte for byte (that newline stays
when lines were added after our block: taken out, it would join the old last line to them). The first line may
name the record of what install wrote (`recorded` reads it back), so that an uninstall run with
another AGENTDESCENT_HOME still finds it. Whether the result still parses is the caller's check
(TOML, YAML), made before anything is written. Left out: which file, and what goes in the block.
"""

from __future__ import annotations

import re

END = "# <<< agentdescent"


NEWLINE_ADDED = " (added a newline above)"
RECORD = "; record: "


def begin(command: str, record: str | None = None) -> str:
    """The first line of our block; `record` (a path with no control character) is named at its end."""
    said = f"# >>> agentdescent: written by `agentdescent install {command}`; `agentdescent uninstall {command}` removes it"
    if record and record.isprintable():
        said += RECORD + record
    return said


def recorded(text: str) -> str | None:
    """The record our block's first line names, or None (no block, or none named)."""
    found = _pattern().search(text)
    first = found.group(0).lstrip("\r\n").split("\n", 1)[0].removesuffix("\r") if found else ""
    first = first.removesuffix(NEWLINE_ADDED)
    return first.split(RECORD, 1)[1] if RECORD in first else None


def _pattern() -> re.Pattern[str]:
    # the block, and the separating newline insert put before it when the file did not end blank
    # (a file whose lines end in CRLF, or were made to since, has the block's lines end so too)
    return re.compile(r"(?:(?<=\n)\r?\n)?# >>> agentdescent: [^\n]*\n.*?^# <<< agentdescent(?:\r?\n)?",
                      re.DOTALL | re.MULTILINE)


def body(text: str) -> str | None:
    """The lines between our markers (what install put there, or what the user made of it since),
    joined by newlines whatever the file's line ending, or None when there is no block."""
    found = _pattern().search(text)
    if found is None:
        return None
    lines = [line.removesuffix("\r") for line in found.group(0).lstrip("\r\n").split("\n")]
    return "\n".join(lines[1:lines.index(END) if END in lines else -1])


def present(text: str) -> bool:
    return _pattern().search(text) is not None


def insert(text: str, block: str, command: str, record: str | None = None) -> str:
    """`text` with our block for `command` at its end (in place of an earlier one of ours), its
    first line naming `record`."""
    text = remove(text)
    newline = "\r\n" if "\r\n" in text else "\n"  # the file's own line ending
    first = begin(command, record)
    body = newline.join([first, *re.sub(r"\r?\n", "\n", block.rstrip()).split("\n"), END]) + newline
    if not text:
        return body
    if not text.endswith("\n"):
        text += newline  # a last line with no newline: give it one, and remember it (see remove)
        return text + newline + body.replace(first, first + NEWLINE_ADDED, 1)
    return text + newline + body


def remove(text: str) -> str:
    """`text` without our block, as it was before `insert`."""
    found = _pattern().search(text)
    if found is None:
        return text
    before, after = text[: found.start()], text[found.end():]
    head = found.group(0).lstrip("\r\n").split("\n", 1)[0]
    if NEWLINE_ADDED in head and before.endswith("\n") and not after:
        # the file's last line had none: only while it is still the last (nothing came after us)
        before = before[: -2 if head.endswith("\r") else -1]
    return before + after
