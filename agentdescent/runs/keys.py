"""Keys in what a run would carry: a target or tasks that hold the value of a key set in the
environment (an API key pasted into a skill, a token in a task).

A run sends its target and tasks to the models and keeps them in its ledger and store, so such a
value is caught before the run starts. With `keys_in_target: refuse` (the default) the spec is
refused, naming the file (or task) and the line, and nothing is stored. With `keys_in_target: mask`
the run works on a copy where each such value reads `[redacted NAME]` (what `redact` prints): the
models, the ledger and the run store only ever see the marker, and `accept` puts the value back
from the environment before it writes, so the user's file keeps it.

    problems("refuse", "token: sk-live-...\\n", [], name="prompt.md")
        ->  [Problem(field="target", message="prompt.md: line 1 holds the value of OPENAI_API_KEY: ...")]

A folder's files that are not text are searched too (`asset_problems`), and refused whatever the
policy: no marker can stand in for a value inside bytes.

Left out: keys in other forms than `redact` finds (see its module docstring), and values that are
not in the environment of the process that checks the spec.
"""

from __future__ import annotations

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


def unmasked(content: Content) -> Content:
    """The content with each marker back to its variable's value, read from the environment now;
    `UserError` naming a variable that is not set here."""
    texts = [content] if isinstance(content, str) else list(content.values())
    missing = sorted({name for text in texts for name in _MARKER.findall(text)
                      if not os.environ.get(name, "").strip()})
    if missing:
        raise UserError(f"the run's result holds [redacted {missing[0]}] where the target held the value of "
                        f"{', '.join(missing)}; set {'it' if len(missing) == 1 else 'them'} in this environment as when "
                        "the run started, and accept again (nothing was written)")
    return _mapped(content, lambda text: _MARKER.sub(lambda m: os.environ[m.group(1)].strip(), text))


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
