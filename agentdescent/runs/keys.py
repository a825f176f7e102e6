"""Keys in what a run would carry: a target or tasks that hold the value of a key set in the
environment (an API key pasted into a skill, a token in a task).

A run sends its target and tasks to the models and keeps them in its ledger and store, so such a
value is caught before the run starts. With `keys_in_target: refuse` (the default) the spec is
refused, naming the file (or task) and the line, and nothing is stored. With `keys_in_target: mask`
the run works on a copy where each such value reads `[redacted NAME]` (what `redact` prints): the
models, the ledger and the run store only ever see the marker, and `accept` puts the value back
from the environment before it writes, so the user's file keeps it. It puts it back only where the
key was: in a line the run kept as the masked copy (its sealed target.json) had it, in the same
file, as a diff aligns the two. A marker anywhere else (a line the run wrote or changed, one moved
to another file, one naming a variable the line never held) is written as it is, and `left` names
it, so that a model cannot have a key, or any variable's value, written where the user never put it.

    unmasked("a\\nkey: [redacted K]\\nb [redacted K]\\n", "a\\nkey: [redacted K]\\n")
        ==  "a\\nkey: <the value of K>\\nb [redacted K]\\n"

    problems("refuse", "token: sk-live-...\\n", [], name="prompt.md")
        ->  [Problem(field="target", message="prompt.md: line 1 holds the value of OPENAI_API_KEY: ...")]

A folder's files that are not text are searched too (`asset_problems`), and refused whatever the
policy: no marker can stand in for a value inside bytes.

Left out: keys in other forms than `redact` finds (see its module docstring), and values that are
not in the environment of the process that checks the spec.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from typing import Literal

from agentdescent.agents.redact import MARKER, located, redact, secrets
from agentdescent.errors import UserError
from agentdescent.runs.spec import Problem
from agentdescent.types import Task

KeyPolicy = Literal["refuse", "mask"]
Content = str | dict[str, str]
_MARKER = re.compile(re.escape(MARKER).replace(r"\{name\}", r"([A-Za-z_][A-Za-z0-9_]*)"))
SHOWN = 5  # findings listed in one problem; the rest are counted


def problems(policy: KeyPolicy, content: Content, tasks: list[Task], *, name: str) -> list[Problem]:
    """What keeps the run from starting: with `refuse`, every place a key's value is found; with
    `mask`, text that already reads like a marker (it could not be told from a masked key).
    `name` is the text target's file name, for the messages."""
    files = _files(content, name)
    if policy == "mask":
        return _marker_problems(files, tasks)
    found = [Problem(field="target", message=m) for m in _places(files)]
    tasks_with_keys = [task.id for task in tasks if located(task.model_dump_json())]
    if tasks_with_keys:
        ids = redact(", ".join(tasks_with_keys[:SHOWN]))  # an id may be the key itself
        found.append(Problem(field="tasks", message=_refusal(f"task {ids}{_more(tasks_with_keys)} holds the value of a key")))
    return found


def asset_problems(assets: Mapping[str, bytes]) -> list[Problem]:
    """A folder's files that are not text and hold a key's value: such a file would be kept in the
    run store, and no marker can stand in for a value inside bytes, whatever `keys_in_target` says."""
    values = {name: value.encode("utf-8") for name, value in secrets().items()}
    said = [f"{path} holds the value of {name}" for path, data in sorted(assets.items())
            for name, value in values.items() if value in data]
    if not said:
        return []
    return [Problem(field="target", message="; ".join(said[:SHOWN]) + _more(said) + ": the run would keep it in its "
                                            "run store. Take it out, or leave the file out of the run with exclude")]


def masked(content: Content, tasks: list[Task]) -> tuple[Content, list[Task]]:
    """The target and the tasks with every key's value replaced by its marker."""
    return _mapped(content, redact), [Task.model_validate_json(redact(task.model_dump_json())) for task in tasks]


def unmasked(content: Content, target: Content) -> Content:
    """`content` (the run's version) with each marker of a line it kept from `target` (the masked
    copy the run started from) back to its variable's value, read from the environment now; every
    other marker as it is (`left` names them). `UserError` naming a variable to put back that is
    not set here."""
    files, before = _paired(content, target)
    kept = {path: _kept_lines(text, before.get(path)) for path, text in files.items()}
    lines = {path: text.split("\n") for path, text in files.items()}
    names = {name for path, found in kept.items() for j in found for name in _MARKER.findall(lines[path][j])}
    missing = sorted(name for name in names if not os.environ.get(name, "").strip())
    if missing:
        raise UserError(f"the run's result holds [redacted {missing[0]}] where the target held the value of "
                        f"{', '.join(missing)}; set {'it' if len(missing) == 1 else 'them'} in this environment as when "
                        "the run started, and accept again (nothing was written)")
    put_back = {path: "\n".join(_MARKER.sub(_value, line) if j in kept[path] else line for j, line in enumerate(lines[path]))
                for path in files}
    return put_back[""] if isinstance(content, str) else put_back


def left(content: Content, target: Content, *, name: str) -> list[str]:
    """Each marker `content` holds that `unmasked` leaves as it is, and where (`name` is the text
    target's file name): left("x [redacted HOME]\\n", "x\\n", name="p.md") == ["p.md line 1: [redacted HOME]"]"""
    files, before = _paired(content, target)
    said = []
    for path, text in files.items():
        kept = _kept_lines(text, before.get(path))
        said += [f"{path or name} line {j + 1}: {marker.group(0)}" for j, line in enumerate(text.split("\n"))
                 if j not in kept for marker in _MARKER.finditer(line)]
    return said


def said(left: list[str]) -> str:
    """How many markers `left` are, for a message: said(["p.md line 3: [redacted HOME]"]) ==
    "1 marker left as it is: not where the target held the key" """
    one = len(left) == 1
    return (f"{len(left)} marker{'' if one else 's'} left as {'it is' if one else 'they are'}: not where the target "
            "held the key")


def _paired(content: Content, target: Content) -> tuple[dict[str, str], dict[str, str]]:
    """The run's version and the masked target as {file: text}, a text target's file named ""."""
    def files(c: Content) -> dict[str, str]:
        return {"": c} if isinstance(c, str) else c
    return files(content), (files(target) if isinstance(target, str) == isinstance(content, str) else {})


def _value(marker: re.Match[str]) -> str:
    return os.environ[marker.group(1)].strip()


def _kept_lines(text: str, before: str | None) -> set[int]:
    """The lines of `text` (cut at each "\\n") holding a marker that stand where `before` had them, as a
    diff aligns the two (the matcher `show`'s diff uses; a line's ending is not part of it, so a last
    line that gained one still counts). A file the target did not have keeps none."""
    now = [line.removesuffix("\r") for line in text.split("\n")]
    marked = {j for j, line in enumerate(now) if _MARKER.search(line)}
    if not marked or before is None:
        return set()
    if text == before:
        return marked
    was = [line.removesuffix("\r") for line in before.split("\n")]
    blocks = difflib.SequenceMatcher(None, was, now).get_matching_blocks()
    return {j for _, start, size in blocks for j in range(start, start + size)} & marked


def _places(texts: dict[str, str]) -> list[str]:
    said = [f"{where}line {text.count(chr(10), 0, start) + 1} holds the value of {name}"
            for where, text in texts.items() for name, start, _ in located(text)]
    return [_refusal("; ".join(said[:SHOWN]) + _more(said))] if said else []


def _refusal(what: str) -> str:
    return (f"{what}: the run would send it to the model and keep it in its ledger and run store. Take it out, or "
            "set keys_in_target: mask to run on a copy that reads [redacted NAME] there (accept puts the value back)")


def _more(listed: list[str]) -> str:
    return f" (and {len(listed) - SHOWN} more)" if len(listed) > SHOWN else ""


def _marker_problems(files: dict[str, str], tasks: list[Task]) -> list[Problem]:
    texts = {**files, **{f"task {redact(task.id)}: ": task.model_dump_json() for task in tasks}}
    clash = next((where for where, text in texts.items() if _MARKER.search(text)), None)
    if clash is None:
        return []
    return [Problem(field="keys_in_target", message=f"{clash}already holds text like [redacted NAME], which accept "
                                                    "could not tell from a masked key; take the key out and use "
                                                    "keys_in_target: refuse instead")]


def _files(content: Content, name: str) -> dict[str, str]:
    """{"<file>: ": text}: where each text is, as the start of a message."""
    return {f"{name}: ": content} if isinstance(content, str) else {f"{path}: ": text for path, text in content.items()}


def _mapped(content: Content, change: Callable[[str], str]) -> Content:
    return change(content) if isinstance(content, str) else {path: change(text) for path, text in content.items()}
