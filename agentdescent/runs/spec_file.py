"""A run spec's file, read as bounded data: a regular file of at most `SPEC_BYTES` (`reading`),
parsed as JSON (`.json`) or YAML (anything else) into a mapping of at most `SPEC_VALUES` values.

A mapping that names one key twice (the merge key `<<` too) is refused: the parsers would keep the
last silently, so a spec could show one budget or agent near its top and set another further down.
A parse error gives its position and kind, never the text around it.

    read_spec_file(Path("run.yaml"))  ->  {"target": "my-skill", "tasks": {...}, ...}

Left out: checking the fields (`spec`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
import yaml.reader

from agentdescent import reading
from agentdescent.errors import UserError

SPEC_BYTES = 1_000_000  # a spec file past this is not a spec
SPEC_VALUES = 1_000_000  # values a spec may expand to (YAML aliases repeat what they name)


class _OnceEach(yaml.SafeLoader):
    """The safe loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        merged: int | None = None
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":  # <<: *defaults, whose keys the mapping's own override
                if merged is not None:  # the parser would merge both, the last one's values winning, unsaid
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the merge key << is given twice (lines {merged} and {line}); keep one "
                        "(<<: [*first, *second] merges several, the first one's values winning)", key_node.start_mark)
                merged = line
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{reading.name_or_count(key)} is given twice (lines {seen[key]} and {line}); keep one",
                    key_node.start_mark)
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


class _TooLong(ValueError):
    """A whole number with more digits than Python reads (`sys.get_int_max_str_digits`), and where."""

    def __init__(self, line: int, column: int) -> None:
        super().__init__(f"a number too long to read (over {sys.get_int_max_str_digits():,} digits) at line {line}, "
                         f"column {column}")


def _yaml_number(loader: _OnceEach, node: yaml.ScalarNode) -> int:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:  # Python's own says nothing of where
        raise _TooLong(node.start_mark.line + 1, node.start_mark.column + 1) from None


_OnceEach.add_constructor("tag:yaml.org,2002:int", _yaml_number)


def _json_number(digits: str, text: str) -> int:
    try:
        return int(digits)
    except ValueError:  # Python's own says nothing of where: the first place these digits stand
        before = text[:text.find(digits)]
        raise _TooLong(before.count("\n") + 1, len(before) - before.rfind("\n")) from None


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a mapping, refusing a key given twice."""
    keys = [key for key, _ in pairs]
    twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if twice is not None:
        raise ValueError(f"{reading.name_or_count(twice)} is given twice in one object; keep one")
    return dict(pairs)


def read_spec_file(path: Path) -> dict[str, Any]:
    """The mapping the spec file at `path` holds; `UserError` saying what is wrong and the fix."""
    text = reading.read_text(path, what="run spec", limit=SPEC_BYTES, encoding="utf-8-sig")
    language = "JSON" if path.suffix == ".json" else "YAML"
    try:
        data = (json.loads(text, object_pairs_hook=_once_each, parse_int=lambda digits: _json_number(digits, text))
                if language == "JSON" else yaml.load(text, Loader=_OnceEach))
    except _TooLong as exc:
        raise UserError(f"{path} holds {exc}; write a shorter one and plan again") from None
    except (ValueError, yaml.YAMLError, RecursionError) as exc:  # a ValueError of ours: a key given twice
        raise UserError(f"{path} is not valid {language}: {_parse_error(exc)}; fix it there and plan again") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of fields (target, tasks, agent, ...)")
    if not _within(data, SPEC_VALUES):
        raise UserError(f"{path} expands to more than {SPEC_VALUES:,} values (YAML aliases repeat what they "
                                "name); write the spec out without aliases of aliases")
    return data


def _parse_error(exc: BaseException) -> str:
    """Where the parser stopped and what kind of problem it saw, never the text around it:
    _parse_error(<yaml error at line 3>) == "line 3, column 5: mapping values are not allowed here" """
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {_elided(exc.msg)}"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or exc.context or "a syntax error"
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem if 'given twice' in problem else _elided(problem)}"
    if isinstance(exc, ValueError) and "given twice" in str(exc):  # ours, from `_once_each`
        return str(exc)
    if isinstance(exc, yaml.reader.ReaderError):
        code = exc.character if isinstance(exc.character, int) else ord(exc.character or "\0")
        return f"offset {exc.position:,}: a character YAML does not allow (#x{code:04x})"
    return type(exc).__name__


def _elided(kind: str) -> str:
    """A parser's words with any longer quoted text in them (a tag, an alias) left out."""
    return re.sub(r"'[^']{13,}'|\"[^\"]{13,}\"", "'…'", kind)[:120]


def _within(data: Any, budget: int) -> bool:
    """Whether `data`, walked as a tree (an alias counted each time it appears), has at most `budget` values."""
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            return False
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return True
