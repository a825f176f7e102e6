"""What a verb writes to stdout as it is rather than through rich: a record for `--json`, a spec's
problems for `plan --json`, and a patch `git apply` takes (`show` into a pipe).

A reader that closes the pipe early (`agentdescent runs --json | head -1`) ends the command quietly
with exit code 1, as rich ends the text verbs; the problems of a spec are capped as its error
message caps them, with their count beside:

    problems(console, exc)   # {"problems": [the first 30], "problems_total": 190000}

Left out: the verbs' lines of text (`watch.say`).
"""

from __future__ import annotations

import json

from pydantic import BaseModel
from rich.console import Console

from agentdescent.runs.spec_problems import LISTED_PROBLEMS, SpecError


def write(console: Console, text: str) -> None:
    """`text` on the console's stream as it is, flushed; a reader gone ends the command (exit 1)."""
    try:
        console.file.write(text)
        console.file.flush()
    except BrokenPipeError:
        console.on_broken_pipe()  # stdout onto /dev/null, so that the exit's flush says nothing either


def record(console: Console, data: object) -> int:
    """`data` as JSON in ASCII: valid in any terminal's encoding, a lone surrogate a model wrote
    included (escaped, as JSON allows); 0, the verb's exit code."""
    write(console, json.dumps(data, indent=2, ensure_ascii=True) + "\n")
    return 0


def model(console: Console, found: BaseModel) -> int:
    """A service's record as JSON, as `record` writes it."""
    return record(console, found.model_dump(mode="json"))


def problems(console: Console, exc: SpecError) -> None:
    """A spec's problems, by field, for a script reading stdout: the first `LISTED_PROBLEMS`, and
    in `problems_total` how many there are."""
    listed = [p.model_dump() for p in exc.problems[:LISTED_PROBLEMS]]
    record(console, {"problems": listed, "problems_total": len(exc.problems)})
