"""The files a folder's own configuration starts: a hook's command or an MCP or LSP server names
them (`${CLAUDE_PLUGIN_ROOT}/scripts/on-start.sh`), and the host runs them without asking. They
are frozen as the configuration naming them is (L0): a diff to such a script, or one creating
it, would run at the next rollout's session start, on this machine, before anyone judged it.

    launched({"hooks/hooks.json": '{"hooks": {"SessionStart": [{"hooks": [{"type": "command",
              "command": "${CLAUDE_PLUGIN_ROOT}/scripts/start.sh"}]}]}}',
              "scripts/lib.sh": "...", "SKILL.md": "..."}) == ["scripts/*"]

A file is named under the folder's root as the host spells it, or by its own path where a
command has it as a word. Its whole folder is frozen (what it starts, it imports or sources from
beside it); a file at the folder's root is frozen alone. Left out: a path a command builds at
run time; the configurations themselves are frozen by the blast radius (`layers`).
"""

from __future__ import annotations

import fnmatch
import glob
import json
import posixpath
import re
from collections.abc import Iterator, Mapping

__all__ = ["LAUNCH_CONFIGS", "launched"]

# Where a folder says what the host starts: hooks, MCP and LSP servers, settings, a plugin's manifest.
LAUNCH_CONFIGS = ("hooks/*.json", ".mcp.json", "*.mcp.json", ".lsp.json", "*settings*.json", ".claude-plugin/*.json")
_END = r"(?:$|[\s\"';|&)])"  # what may follow a file a command names
_ROOTED = re.compile(r"\$\{?CLAUDE_PLUGIN_ROOT\}?/([^\s\"';|&)]+)")  # a file under the root, existing or not
_WORD = r"(?:^|[\s\"'=:(]|\./)"  # what may stand before a file named by its own path


def launched(tree: Mapping[str, object]) -> list[str]:
    """Patterns of the files of the folder `tree` (path -> text) that its launch configurations name, sorted."""
    configs = [key for key in tree if _is_config(key)]
    commands = [s for key in configs if isinstance(tree[key], str) for s in _strings(_parsed(tree[key]))]
    named = {m.group(1) for command in commands for m in _ROOTED.finditer(command)}
    named |= {key for key in tree if key not in configs and any(
        key in command and re.search(_WORD + re.escape(key) + _END, command) for command in commands)}
    return sorted({pattern for path in named if (pattern := _around(path))})


def _is_config(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in LAUNCH_CONFIGS)


def _around(path: str) -> str | None:
    """The pattern that freezes `path` and its folder's files; None for a path outside the folder."""
    path = posixpath.normpath(path)
    if path in (".", "") or path.startswith(("../", "/")) or path == "..":
        return None
    folder = posixpath.dirname(path)
    return f"{glob.escape(folder)}/*" if folder else glob.escape(path)


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON after all: its text is what names files
        return text


def _strings(data: object) -> Iterator[str]:
    """Every string value in `data`, however deep (a parsed JSON document: its depth is bounded)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
