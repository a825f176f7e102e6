"""A reference domain where one rollout is a sample, not the truth: a noisy solver, a noisy grader
and a reflector that proposes right, vague and harmful rules, with its ground truth known.

The artifact is a playbook of rules (`AppendRules`). Tasks come in `categories`, `per_category`
each, plus `plain` tasks that need no rule. Each category has one right rule; a task of a
category passes with probability `p` when the playbook states that rule (or a harmful rule made
for that category) and `q` when not; a plain task passes with `p`. A harmful rule fixes its own
category but breaks what works now, the plain tasks or a category the playbook already has the
right rule for: their tasks pass with `q` whatever else the playbook says. A vague rule ("Be
more careful.") changes nothing. The grader flips a reward with probability `flip`. The
reflector, shown a failure, proposes the right rule for its category with probability `right`
(worded another way with probability `reword`, as a model rewords what it says: each wording
works as well, and a playbook that states one rule twice is longer for nothing), a vague rule
with `vague`, a harmful one with the rest; shown a failure a harmful rule caused,
it proposes narrowing that rule to the right rule of its category; told what was tried and
refused, it draws again rather than repeat it. Every draw comes from a stream seeded by the
domain's seed, the task, what was rolled out and how many times it was asked. The solver's
output names its own draw ("pass#3f9a0c21d4e7"), and the grader draws each flip from the output
it grades, so a flip belongs to its rollout whichever order concurrent rollouts are graded in:
a run is reproducible with one worker, and many make the same calls in any order.

    domain = NoisyDomain(NoisyLevels(p=0.85, q=0.1, flip=0.05))
    result = evolve(domain.tasks(), domain.reward, run=domain.run, propose=domain.propose)
    domain.truth(result.state)      # rules learnt, harmful, vague and restated rules kept

Left out: latency (the benchmarks add it) and any model.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentdescent.testing.attempts import Attempts
from agentdescent.types import Task, Tried

VAGUE = ("Be more careful.", "Double-check every answer.", "Think before you answer.", "Read the request twice.")
# Other wordings of a category's right rule, after "For a cN request, "
REWORDED = ("always begin by quoting its reference code.", "quote its reference code before anything else.",
            "start with its reference code, quoted.")
PLAIN = "plain"
REDRAWS = 3  # a reflector told what was tried draws again this often before it gives up


@dataclass(frozen=True, kw_only=True)
class NoisyLevels:
    """How noisy the domain is (see the module docstring); the defaults are the noisy setting."""

    p: float = 0.85  # a task passes with its rule stated
    q: float = 0.1  # ... and without it
    flip: float = 0.0  # the grader flips a reward
    right: float = 0.6  # the reflector proposes the right rule
    vague: float = 0.25  # ... a vague one; the rest are harmful
    reword: float = 0.0  # a right rule proposed is worded another way
    categories: int = 8
    per_category: int = 6
    plain: int = 12


@dataclass(frozen=True)
class Truth:
    """What a playbook really holds, read against the domain's rules."""

    learnt: int  # right rules stated (in any wording)
    harmful: int  # harmful rules kept
    vague: int  # vague rules kept
    categories: int
    restated: int = 0  # wordings of a right rule the playbook already states


def verdict(output: str) -> str:
    """What a solver's output says, without the name of its draw: verdict("pass#3f9a0c21d4e7") == "pass"."""
    return output.partition("#")[0]


def right_rule(category: int) -> str:
    """right_rule(3) == "For a c3 request, quote its reference code first." """
    return f"For a c{category} request, quote its reference code first."


def right_category(rule: str) -> int | None:
    """The category `rule` is a wording of the right rule for, or None.
    right_category("For a c3 request, start with its reference code, quoted.") == 3"""
    head, _, said = rule.partition(" request, ")
    if not head.startswith("For a c") or not head[7:].isdigit():
        return None
    return int(head[7:]) if said in (right_rule(0).partition(" request, ")[2], *REWORDED) else None


def harmful_rule(category: int, victim: int | str) -> str:
    """A rule that fixes `category` and breaks `victim` (a category, or the plain tasks)."""
    return f"For a c{category} request, quote its reference code first, and treat every {_name(victim)} request as c{category}."


class NoisyDomain:
    """The domain's tasks, solver, grader and reflector (see the module docstring)."""

    def __init__(self, levels: NoisyLevels = NoisyLevels(), *, seed: int = 0) -> None:
        self.levels, self.seed = levels, seed
        self._asked = Attempts()

    def tasks(self) -> list[Task]:
        n = self.levels
        made = [Task(id=f"c{c}-{i}", prompt=f"a c{c} request, number {i}", gold="pass", meta={"category": c})
                for c in range(n.categories) for i in range(n.per_category)]
        return made + [Task(id=f"plain-{i}", prompt=f"a plain request, number {i}", gold="pass",
                            meta={"category": PLAIN}) for i in range(n.plain)]

    def run(self, rendered: str, task: Task) -> str:
        """The solver: "pass" or "fail", drawn for this rollout, then "#" and the draw's name
        (`verdict` reads the first part)."""
        chance = self._pass_chance(rendered, task.meta["category"])
        roll, name = self._named_draw("run", task.id, rendered)
        return f"{'pass' if roll < chance else 'fail'}#{name}"

    def reward(self, task: Task, output: str) -> float:
        """The grader: exact, flipped with probability `flip`. The flip is drawn from `output`,
        which names its rollout's draw, so each rollout has its own; grading one again draws anew."""
        right = 1.0 if verdict(output) == "pass" else 0.0
        return 1.0 - right if self._draw("grade", task.id, output) < self.levels.flip else right

    def propose(self, rendered: str, task: Task, output: str, reward: float, *,
                tried: Sequence[Tried] = ()) -> str | None:
        """The reflector: a rule for the failure's category, or the rule that broke it narrowed.
        Told what was `tried` and refused, it heeds it as a model would: a refused proposal it
        would repeat it draws again, up to `REDRAWS` times, and then proposes nothing."""
        category = task.meta["category"]
        culprit = self._breaker(rendered, category)
        if culprit is not None:  # narrowed to what it was for
            return f"replace: {culprit} => {right_rule(int(culprit.split()[2].removeprefix('c')))}"
        known = {t.proposal for t in tried}
        for _ in range(REDRAWS if tried else 1):
            proposal = self._proposal(rendered, task, category)
            if proposal not in known:
                return proposal
        return None

    def _proposal(self, rendered: str, task: Task, category: int | str) -> str:
        roll = self._draw("reflect", task.id, rendered)
        n = self.levels
        if isinstance(category, str) or roll < n.vague:  # PLAIN, the one category that is no number
            return VAGUE[int(roll * 1000) % len(VAGUE)]
        if roll < n.vague + n.right:
            word = self._draw("word", task.id, rendered)
            if word < n.reword:
                return f"For a c{category} request, {REWORDED[int(word * 1000) % len(REWORDED)]}"
            return right_rule(category)
        rules = _rules(rendered)
        working = [c for c in range(n.categories) if c != category and right_rule(c) in rules]
        victims: list[int | str] = [PLAIN, *working]  # what works now: a rule that breaks a failing category would harm nothing yet
        return harmful_rule(category, victims[int(roll * 7919) % len(victims)])

    def truth(self, state: Mapping[str, str] | str) -> Truth:
        """What the playbook in `state` (or its rendered text) holds, by the domain's own rules."""
        text = state if isinstance(state, str) else "\n".join(state.values())
        n = self.levels
        rules = _rules(text)
        stated = [c for r in rules if (c := right_category(r)) is not None]
        return Truth(learnt=len(set(stated)), harmful=sum(1 for r in rules if ", and treat every " in r),
                     vague=sum(1 for r in rules if r in VAGUE), categories=n.categories,
                     restated=len(stated) - len(set(stated)))

    def expected(self, state: Mapping[str, str] | str, tasks: list[Task]) -> float:
        """The reward the playbook in `state` (or its rendered text) earns on `tasks` on average,
        the grader's flips included: its true score, which a run's measurements only estimate."""
        text = state if isinstance(state, str) else "\n".join(f"- {v}" for v in state.values())
        chances = [self._pass_chance(text, t.meta["category"]) for t in tasks]
        flip = self.levels.flip
        return sum(c * (1 - flip) + (1 - c) * flip for c in chances) / len(chances) if chances else 0.0

    def _pass_chance(self, rendered: str, category: int | str) -> float:
        rules = _rules(rendered)
        if _breaker(rules, category) is not None:
            return self.levels.q
        if category == PLAIN:
            return self.levels.p
        stated = any(r.startswith(f"For a c{category} request,") for r in rules)  # the right rule, or a harmful one for it
        return self.levels.p if stated else self.levels.q

    def _breaker(self, rendered: str, category: int | str) -> str | None:
        return _breaker(_rules(rendered), category)

    def _draw(self, what: str, task_id: str, seen: str) -> float:
        """A fresh draw for each time the same is asked (a model asked again may answer otherwise)."""
        return self._named_draw(what, task_id, seen)[0]

    def _named_draw(self, what: str, task_id: str, seen: str) -> tuple[float, str]:
        """`_draw`'s value and a short name of the draw, unique to it within the domain's seed."""
        key = (what, task_id, hashlib.sha256(seen.encode("utf-8")).hexdigest())
        attempt = self._asked.next(key)
        digest = hashlib.sha256(f"{self.seed}|{key}|{attempt}".encode("utf-8")).hexdigest()
        return random.Random(digest).random(), digest[:12]


def _breaker(rules: set[str], category: int | str) -> str | None:
    """The harmful rule that breaks `category`'s tasks, if the playbook holds one."""
    marker = f", and treat every {_name(category)} request as "
    return next((r for r in sorted(rules) if marker in r), None)


def _name(category: int | str) -> str:
    return PLAIN if category == PLAIN else f"c{category}"


def _rules(text: str) -> set[str]:
    """The rules a playbook states, one a line (an `AppendRules` rendering: "- rule")."""
    return {line.strip().removeprefix("- ").strip() for line in text.splitlines() if line.strip()}
