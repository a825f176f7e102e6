"""The files a folder's own configuration starts: a hook's command or an MCP or LSP server names
them (`${CLAUDE_PLUGIN_ROOT}/scripts/on-start.sh`), and the host runs them without asking. They
are frozen as the configuration naming them is (L0): a diff to such a script, or one creating
it, would run at the next rollout's session start, on this machine, before anyone judged it.

    launched({"hooks/hooks.json": '{"hooks": {"SessionStart": [{"hooks": [{"type": "command",
              "command": "sh \\"${CLAUDE_PLUGIN_ROOT}\\"/scripts/start.sh"}]}]}}',
              "scripts/lib.sh": "...", "SKILL.md": "..."}) == ["*.sh", "scripts/lib.sh", "scripts/start.sh"]

A command is read as words, whatever its quoting: quotes dropped, `$VAR` and `${VAR}` read as the
folder's root (each host names the root by a variable of its own), `//` as `/`, a word `a.b` also
as the folder `a` (`python -m a.b`). A word naming a file of the folder, or a path in one of its
folders, is launched, and so is a folder named alone (`cd .../scripts && ./run.sh`). Frozen with a
launched file: its own path, the files beside and below it that are not Markdown (what it
sources or imports), and every file of its kind (`*.sh`: what it may call by name); with a
folder, the whole folder. A launched `.json` file is read as a configuration too (a manifest's
`"hooks": "./config/hooks.json"`), and so are the hooks and servers of a Markdown file's
frontmatter. Reading more than is launched only freezes more; a diff it refuses says which rule.
Left out: a path a command builds from parts at run time.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import posixpath
import re
from collections.abc import Iterator, Mapping

from agentdescent.governance import capabilities

__all__ = ["LAUNCH_CONFIGS", "launched"]

# Where a folder says what the host starts: hooks, MCP and LSP servers, settings, a plugin's manifest.
LAUNCH_CONFIGS = ("hooks/*.json", ".mcp.json", "*.mcp.json", ".lsp.json", "*settings*.json", ".claude-plugin/*.json")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]\w*")
_QUOTES = re.compile(r"[\"'`]")
_BETWEEN = re.compile(r"[\s;|&()<>=,]+")  # what stands between a command's words
RUNS = {"command", "args", "hooks", "mcpServers", "lspServers", "statusLine", "env", "cwd"}  # keys over what runs
_KIND = re.compile(r"\.\w+$")  # a file's kind, by its suffix
_STARTS = ("hooks", "mcpservers", capabilities.OTHERWISE)  # a Markdown file's frontmatter fields that start things


def launched(tree: Mapping[str, object]) -> list[str]:
    """Patterns of the files of the folder `tree` (path -> text) that its launch configurations name, sorted."""
    texts = {key: text for key, text in tree.items() if isinstance(text, str)}
    folders = {key.rsplit("/", i)[0] for key in texts for i in range(1, key.count("/") + 1)}
    configs = {key for key in texts if any(fnmatch.fnmatchcase(key, p) for p in LAUNCH_CONFIGS)}
    commands = [line for key in texts if key.lower().endswith(".md")
                for name, lines in capabilities.frontmatter_fields(texts[key]).items() if name in _STARTS for line in lines]
    files: set[str] = set()
    named_folders: set[str] = set()
    read: set[str] = set()
    seen = 0  # commands read for paths so far
    while True:  # a launched .json is a configuration too: read until none is new
        for key in sorted(configs - read):
            read.add(key)
            parsed = _parsed(texts[key])
            commands += list(_commands(parsed, counted=isinstance(parsed, str)))  # a text not JSON: all of it
        new, seen = commands[seen:], len(commands)
        for path, slashed in {p for command in new for p in _paths(command)}:
            if path in folders and path not in texts:
                if slashed:  # a folder named as a path, not a word that happens to be its name
                    named_folders.add(path)
            elif path not in configs:
                files.add(path)
                if path.endswith(".json") and path in texts:
                    configs.add(path)
        if not configs - read:
            break
    patterns = {f"{glob.escape(folder)}/*" for folder in named_folders if folder}
    for path in files:
        if path not in texts and not _KIND.search(path) and "/" not in path:
            continue  # a word of the command (sh, node, -c), not a file of the folder
        patterns.add(glob.escape(path))
        folder = posixpath.dirname(path)
        if path in texts or folder:  # what it sources or imports from beside it
            patterns |= {glob.escape(key) for key in texts if not key.lower().endswith(".md") and key not in configs
                         and (key.startswith(folder + "/") if folder else "/" not in key)}
        kind = _KIND.search(path)
        if kind and kind.group().lower() not in (".md", ".json"):
            patterns.add(f"*{glob.escape(kind.group())}")
    return sorted(patterns)


def _paths(command: str) -> Iterator[tuple[str, bool]]:
    """The paths a command may name in the folder, each with whether it was written as a path (with
    a slash): its words, read as described above."""
    flat = _VARIABLE.sub("/", _QUOTES.sub("", command))
    for word in _BETWEEN.split(flat):
        path = posixpath.normpath(re.sub(r"/+", "/", word).lstrip("/")) if word.strip("/.") else ""
        if not path or path in (".", "..") or path.startswith("../") or path.startswith("-"):
            continue
        yield path, "/" in word
        if "/" not in word and "." in path and not path.startswith("."):
            yield path.split(".")[0], True  # a module `a.b`: the folder `a`


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON after all: its text is what names files
        return text


def _commands(data: object, counted: bool = False) -> Iterator[str]:
    """The strings of a parsed configuration that say what runs: those under a key of `RUNS`, however
    deep (a manifest's `"skills": "./skills/"` is what the host loads, not what it runs); all of a
    text that is not JSON."""
    if isinstance(data, str):
        if counted:
            yield data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _commands(value, counted or key in RUNS)
    elif isinstance(data, list):
        for value in data:
            yield from _commands(value, counted)
