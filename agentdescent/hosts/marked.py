"""A block of ours inside a file a person owns, between two marker lines: put in once, taken out exactly.

    # >>> agentdescent: written by `agentdescent install codex`; `agentdescent uninstall codex` removes it
    ...our lines...
    # <<< agentdescent

`insert` appends the block (or replaces ours, when it is there already) and leaves every other
byte as it was; `remove` takes out the block and the one newline `insert` added before it, so
that an install followed by an uninstall gives the file back byte for byte. Whether the result
still parses is the caller's check (TOML, YAML), made before anything is written. Left out:
which file, and what goes in the block.
"""

from __future__ import annotations

import re

END = "# <<< agentdescent"


def begin(command: str) -> str:
    return f"# >>> agentdescent: written by `agentdescent install {command}`; `agentdescent uninstall {command}` removes it"


def _pattern() -> re.Pattern[str]:
    # the block, and the separating newline insert put before it when the file did not end blank
    return re.compile(r"(?:(?<=\n)\n)?# >>> agentdescent: [^\n]*\n.*?^# <<< agentdescent\n?", re.DOTALL | re.MULTILINE)


def present(text: str) -> bool:
    return _pattern().search(text) is not None


def insert(text: str, block: str, command: str) -> str:
    """`text` with our block for `command` at its end (in place of an earlier one of ours)."""
    text = remove(text)
    body = f"{begin(command)}\n{block.rstrip()}\n{END}\n"
    if not text:
        return body
    if not text.endswith("\n"):
        text += "\n"  # a last line with no newline: give it one, and remember it (see remove)
        return text + "\n" + body.replace(begin(command), begin(command) + " (added a newline above)", 1)
    return text + "\n" + body


def remove(text: str) -> str:
    """`text` without our block, as it was before `insert`."""
    found = _pattern().search(text)
    if found is None:
        return text
    before, after = text[: found.start()], text[found.end():]
    if "(added a newline above)" in found.group(0) and before.endswith("\n"):
        before = before[:-1]
    return before + after
