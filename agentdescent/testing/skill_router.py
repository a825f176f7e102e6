"""The support-router skill's offline stand-ins: an agent that routes as the skill's files say, and
a scripted reflector that edits those files, so that a folder run needs no model and no key.

The skill (`examples/skills/support-router`) routes customer support requests to a team: each
team's file in `routing/` lists the words that send a request there. `route_by_skill` is the
agent of a rollout: it reads the routing files where Claude Code would find the skill in its
workspace (`.claude/skills/support-router/`) and answers the first team whose words the request
mentions. `SkillReflector` is a model, `prompt -> text`: it reads one misrouted request in the
tree reflector's prompt and answers with one routing file rewritten. A run spec names them from
any folder:

    agent: python:agentdescent.testing:route_by_skill
    reflector: python:agentdescent.testing:SkillReflector

What it leaves out: the skill's files (the example's), running a domain (`evolve`, or
`examples/skill_dir_evolution.py`), and any model.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentdescent.artifacts.fileblocks import file_block
from agentdescent.testing.attempts import Attempts
from agentdescent.testing.router import FILLERS, SIGNALS
from agentdescent.types import Task

__all__ = ["SKILL_NAME", "TEAMS", "RoutingTruth", "SkillReflector", "listed_words", "route_by_skill", "routing_truth",
           "sampled"]

SKILL_NAME = "support-router"
TEAMS = tuple(SIGNALS)  # the order the skill checks them in


def listed_words(text: str) -> list[str]:
    """The words a routing file lists. listed_words("# billing\n\n- invoice\n") == ["invoice"]"""
    return [line[2:].strip().lower() for line in text.splitlines() if line.startswith("- ")]


def route_by_skill(prompt: str, cwd: str, latency: float = 0.0) -> str:
    """The offline agent: it reads the skill's routing files where Claude Code would, and routes as they say."""
    time.sleep(latency)
    routing = Path(cwd, ".claude", "skills", SKILL_NAME, "routing")
    said = set(re.findall(r"\w+", prompt.lower()))
    for team in TEAMS:
        if said & set(listed_words((routing / f"{team}.md").read_text(encoding="utf-8"))):
            return team
    return "general"


def sampled(answer: str, gold: str, roll: float, *, p: float, q: float) -> str:
    """The routing agent's `answer` as a sample, for a draw `roll` in [0, 1): where it is right, it
    stays right with probability `p` (else another team); where it is wrong, it is right with `q`."""
    if answer == gold:
        return answer if roll < p else next(team for team in (*TEAMS, "general") if team != gold)
    return gold if roll < q else answer


@dataclass(frozen=True)
class RoutingTruth:
    """What a version of the skill really holds, read off its routing files against the tasks."""

    learnt: int  # the tasks' signal words listed under their own team
    to_learn: int  # the tasks' signal words, each team's counted once
    fillers: int  # filler words listed under any team: each sends some request to the wrong team
    right: float  # the share of the tasks the files route right (the agent without noise)


def routing_truth(state: Mapping[str, str], tasks: Sequence[Task]) -> RoutingTruth:
    """The ground truth of `state` (a folder's files by path) on `tasks`."""
    listed = {team: listed_words(state.get(f"routing/{team}.md", "")) for team in TEAMS}
    needed = {(task.gold, w) for task in tasks if task.gold in SIGNALS
              for w in re.findall(r"\w+", task.prompt.lower()) if w in SIGNALS[task.gold]}
    right = 0
    for task in tasks:
        said = set(re.findall(r"\w+", task.prompt.lower()))
        right += next((team for team in TEAMS if said & set(listed[team])), "general") == task.gold
    return RoutingTruth(learnt=sum(w in listed[team] for team, w in needed), to_learn=len(needed),
                        fillers=sum(w in FILLERS for words in listed.values() for w in words),
                        right=right / max(1, len(tasks)))


class SkillReflector:
    """The offline reflector: reads a misrouted request in the tree reflector's prompt and adds one
    word under the expected team's heading. It picks the word that signals the team most of the
    time, a filler word that fixes this request and breaks others some of the time (`noise`), and
    nothing now and then (`silence`). Deterministic for a seed; asked again, it may answer otherwise."""

    def __init__(self, seed: int = 0, *, noise: float = 0.1, silence: float = 0.1, latency: float = 0.0) -> None:
        self.seed, self.noise, self.silence, self.latency = seed, noise, silence, latency
        self._asked = Attempts()

    def __call__(self, prompt: str) -> str:
        time.sleep(self.latency)
        case = re.search(r"<task>\n(.*?)\n</task>\n<answer>\n(.*?)\n</answer>\n<expected>\n(\w+)\n</expected>", prompt, re.DOTALL)
        if case is None:
            return "NONE"
        request, answered, team = case.group(1).lower(), case.group(2).strip().lower(), case.group(3)
        words = re.findall(r"\w+", request)
        if answered in TEAMS:  # a listed word sent it to the wrong team: take that word out
            text = _routing_file(prompt, answered)
            misfire = next((w for w in words if w in listed_words(text)), None) if text else None
            if text is None or misfire is None:
                return "NONE"
            return _file_block(answered, text.replace(f"- {misfire}\n", "", 1))
        text = _routing_file(prompt, team)
        if text is None:  # a general request: nothing to add
            return "NONE"
        roll = self._rng(prompt).random()
        if roll < self.silence:
            return "NONE"
        pool = FILLERS if roll < self.silence + self.noise else SIGNALS[team]
        word = next((w for w in words if w in pool and w not in listed_words(text)), None)
        return "NONE" if word is None else _file_block(team, text + f"- {word}\n")

    def _rng(self, prompt: str) -> random.Random:
        key = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        attempt = self._asked.next(key)
        return random.Random(f"{self.seed}|{key}|{attempt}")


def _routing_file(prompt: str, team: str) -> str | None:
    found = re.search(rf'<file path="routing/{team}.md">\n(.*?)</file>', prompt, re.DOTALL)
    return found.group(1) if found else None


def _file_block(team: str, text: str) -> str:
    return file_block(f"routing/{team}.md", text)
