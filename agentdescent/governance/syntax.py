"""Syntax: a change leaves each file of a folder as readable as it found it.

A file that parses before a change must parse after it (`breakage`): a `.py` file compiles
(`compile`, never run), a `.json` file and a `.yaml`/`.yml` file load, and a Markdown file's
frontmatter (a first line `---` up to the next `---` line), where a host reads a skill's or a
subagent's name, description and tools, loads as a mapping. A new `.py`, `.json` or `.yaml` file
must parse too (a new Markdown file may open with a `---` rule that is no frontmatter). An
agent that reads a file rather than running it finds no fault in a change that breaks it, and
Claude Code leaves out a subagent whose frontmatter does not parse, saying nothing; so such a
change is `invalid` at the door, before any rollout is paid for it; and a text the step merges
of two edits that each parse is checked too (`step/resolve.py`, and `step/commit.py` where a change
is carried onto another writer's head), since their merge may not parse.

    breakage("agent.py", "x = 1\\n", "x = (\\n")  ==  "would not compile: line 1: '(' was never closed"

Each text is parsed in bounded time: one (or a frontmatter block) past `MAX_PARSED_CHARS` is not
parsed, since neither Python's parser (an f-string of many fields) nor PyYAML's (deep or long flow
collections) is linear in every text; YAML is read by the safe loader, libyaml's where PyYAML has
it. Left out: a file that did not parse before (its state is not the change's doing), a Markdown
file with no frontmatter or a new one, other formats, and whether code runs or imports; code compiles under the
Python that runs agentdescent, not the one the target may run under.
"""

from __future__ import annotations

import functools
import json
import threading
import warnings
from collections.abc import Callable, Sequence

from agentdescent.types import Edit

__all__ = ["MAX_PARSED_CHARS", "breakage", "unreadable"]

MAX_PARSED_CHARS = 100_000
_KINDS = {".py": "py", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".md": "md"}
_VERBS = {"py": "not compile", "json": "not be valid JSON", "yaml": "not be valid YAML", "md": "break its frontmatter"}
_PARSES = {"py": "compile", "json": "load as JSON", "yaml": "load as YAML"}
_WARNINGS = threading.Lock()  # `catch_warnings` swaps a global: two threads in it at once could leave it swapped

Problem = tuple[int, str]  # the line (1 for the whole text) and what is wrong there


class _TooLong(Exception):
    """A text past MAX_PARSED_CHARS: left unparsed."""


def unreadable(edits: Sequence[Edit], named: Callable[[str], str] = repr) -> str | None:
    """Why `edits` leave a file unreadable (`breakage`), naming it as `named` does; None when none does."""
    for edit in edits:
        broken, kind = breakage(edit.key, edit.before, edit.after), _kind(edit.key)
        if broken:  # a file of a kind read here (`kind`), and for a new one of a kind that is parsed
            rule = (f"a new file of its kind must {_PARSES[kind]}" if edit.before is None and kind is not None else
                    "it parses before this change, and a change must leave it parsing")
            return f"{named(edit.key)} {broken} ({rule}: fix that line, or leave the file out)"
    return None


def breakage(key: str, before: str | None, after: str | None) -> str | None:
    """How `after` leaves the file `key` unreadable that `before` left readable (or, a new file
    other than Markdown, does not parse), with the line and the parser's words; None when it is
    readable, or when the rule does not apply (a deletion, a file of another kind, a text past
    MAX_PARSED_CHARS)."""
    kind = _kind(key)
    if kind is None or after is None or (before is None and kind == "md"):
        return None
    try:
        if before is not None and _problem(kind, before) is not None:
            return None
        problem = _problem(kind, after)
    except _TooLong:
        return None
    return None if problem is None else f"would {_VERBS[kind]}: line {problem[0]}: {problem[1]}"


def _kind(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1].lower()
    return next((kind for suffix, kind in _KINDS.items() if name.endswith(suffix)), None)


def _problem(kind: str, text: str) -> Problem | None:
    if kind == "md":
        return _frontmatter(text)
    if len(text) > MAX_PARSED_CHARS:
        raise _TooLong
    return _parsed(kind, text)


def _frontmatter(text: str) -> Problem | None:
    """Where and why `text` has no frontmatter a host can read, or None."""
    lines = text.removeprefix("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return 1, "the first line is not '---', which opens it"
    size = 0
    for end, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            problem = _parsed("fields", "\n".join(lines[1:end]))
            return None if problem is None else (problem[0] + 1, problem[1])  # its first line is the file's second
        size += len(line) + 1
        if size > MAX_PARSED_CHARS:
            raise _TooLong
    return 1, "no line '---' closes it"


@functools.lru_cache(maxsize=64)  # head's text is checked again for every diff that changes it
def _parsed(kind: str, text: str) -> Problem | None:
    """Where and why `text` does not parse as `kind` (py, json, yaml, or fields: a YAML mapping), or None."""
    import yaml  # here: a process that checks no YAML file (the CLI, the MCP server) does not import PyYAML

    safe = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's reader, where PyYAML has it: linear in more texts
    text = text.removeprefix("\ufeff")  # a byte order mark, which Python and JSON readers of a file skip
    try:
        if kind == "py":
            with _WARNINGS, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an invalid escape's SyntaxWarning: the file still compiles
                compile(text, "<file>", "exec", dont_inherit=True)
        elif kind == "json":
            json.loads(text)
        elif kind == "yaml":
            list(yaml.load_all(text, Loader=safe))  # a file may hold several documents, `---` between them
        else:
            fields = yaml.load(text, Loader=safe)
            if not isinstance(fields, dict):
                what = "nothing" if fields is None else type(fields).__name__
                return 1, f"it reads as {what}, not as fields (name: ..., description: ...)"
    except SyntaxError as exc:
        return exc.lineno or 1, exc.msg
    except json.JSONDecodeError as exc:
        return exc.lineno, exc.msg
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        return (mark.line + 1 if mark else 1), str(exc.problem or exc.context)
    except (yaml.YAMLError, ValueError) as exc:  # a YAML error with no place; a null byte, which compile refuses
        return 1, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except (RecursionError, MemoryError):  # the parsers' limits on nesting
        return 1, "it is nested deeper than it can be read"
    return None
