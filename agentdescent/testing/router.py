"""The reference domain: a keyword-router skill, evolved offline with no model.

Support requests must reach the right handler. The artifact holds routing rules; a small
in-process agent (`route`) routes each request by the first rule whose keyword it mentions (else
`general`). A scripted reflector (`RouterReflector`) reads a misrouted request and proposes a
rule: usually keyed on the word that really signals the handler, sometimes on a filler word that
fixes this request and breaks others (which the acceptance test must refuse), sometimes nothing.
When a rule misfires it proposes removing it. Everything is deterministic for a seed, so a run is
reproducible.

    tasks = router_tasks(seed=0)           # requests for five handlers, and some for none of them
    evolve(tasks, route_reward, run=route, propose=RouterReflector("append"), strategy=demo_strategy("append"))

`route_prompt` and `RouterReflectorModel` are the same agent and reflector as text-in, text-out
models, so that a run spec can name them (`python:agentdescent.testing:route_prompt`).

What it leaves out: any model, and `evolve` itself (this module imports neither the engine nor a
client, so that a worker process or a Ray actor that unpickles `route` stays light).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from typing import Any

from agentdescent.artifacts.strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from agentdescent.testing.attempts import Attempts
from agentdescent.types import Task

__all__ = [
    "DEFAULT_HANDLER", "FILLERS", "SIGNALS", "STRATEGIES", "TEMPLATES", "RouterReflector", "RouterReflectorModel",
    "demo_strategy", "route", "route_prompt", "route_reward", "router_tasks", "routing_rules", "rule_text",
]

# The demo uses the first four words of each handler; the benchmarks can ask for up to twelve.
SIGNALS: dict[str, tuple[str, ...]] = {
    "billing": ("invoice", "charged", "payment", "receipt", "overcharged", "debit", "pricing", "discount",
                "coupon", "tax", "statement", "fee"),
    "shipping": ("tracking", "courier", "delivery", "parcel", "shipment", "dispatch", "postage", "carrier",
                 "warehouse", "address", "eta", "freight"),
    "technical": ("crash", "error", "freezes", "bug", "timeout", "glitch", "offline", "install", "update",
                  "slow", "blank", "sync"),
    "returns": ("refund", "exchange", "damaged", "return", "broken", "defective", "replacement", "warranty",
                "wrong", "missing", "faulty", "label"),
    "account": ("username", "email", "profile", "login", "verification", "settings", "avatar", "security",
                "signup", "deletion", "privacy", "notification"),
}
FILLERS = ("order", "please", "help", "urgent", "today", "again", "app", "website", "week", "still")
TEMPLATES = (
    "{a} - problem with the {s}, {b}",
    "{a}: my {s} is not right {b}",
    "question about {s} ({a}, {b})",
    "{a} {b}: {s} issue",
)
DEFAULT_HANDLER = "general"
STRATEGIES = ("append", "keyed", "single")

_RULE = re.compile(r"when a request mentions '(\w+)', route it to (\w+)", re.IGNORECASE)
_KEYED = re.compile(r"^\s*(\w+):\s*(.+)$", re.MULTILINE)


def router_tasks(seed: int = 0, signals: int = 4, per_signal: int = 6) -> list[Task]:
    """`per_signal` requests for each of `signals` words per handler, each with two fillers, and
    two general requests (no signal word) for every five others."""
    if not 1 <= signals <= 12:
        raise ValueError("signals must be between 1 and 12 words per handler")
    rng = random.Random(f"router:{seed}")
    tasks: list[Task] = []
    for handler, words in SIGNALS.items():
        for signal in words[:signals]:
            for _ in range(per_signal):
                a, b = rng.sample(FILLERS, 2)
                text = rng.choice(TEMPLATES).format(a=a, b=b, s=signal)
                tasks.append(Task(id=f"r{len(tasks):03d}", prompt=text, gold=handler))
    for _ in range(len(tasks) * 2 // 5):
        a, b = rng.sample(FILLERS, 2)
        tasks.append(Task(id=f"r{len(tasks):03d}", prompt=f"{a} {b}: a general question", gold=DEFAULT_HANDLER))
    return tasks


@functools.lru_cache(maxsize=256)
def routing_rules(rendered: str) -> tuple[tuple[str, str], ...]:
    """(keyword, handler) pairs in the order the artifact states them, in either rule format."""
    rules = tuple((w.lower(), h.lower()) for w, h in _RULE.findall(rendered))
    if rules:
        return rules
    return tuple(
        (word.strip().lower(), handler.lower())
        for handler, words in _KEYED.findall(rendered)
        for word in words.split(",")
        if word.strip()
    )


def route(rendered: str, task: Task) -> str:
    """The agent under improvement: the first rule whose keyword the request mentions wins."""
    words = set(re.findall(r"\w+", task.prompt.lower()))
    for keyword, handler in routing_rules(rendered):
        if keyword in words:
            return handler
    return DEFAULT_HANDLER


def route_reward(task: Task, output: str) -> float:
    return 1.0 if output.strip().lower() == task.gold else 0.0


def rule_text(keyword: str, handler: str) -> str:
    return f"When a request mentions '{keyword}', route it to {handler}."


def demo_strategy(kind: str) -> Strategy:
    if kind == "append":
        return AppendRules(header="Routing rules (first match wins; otherwise: general):")
    if kind == "keyed":
        return KeyedRules(list(SIGNALS))
    if kind == "single":
        return SingleSlot("Route each support request to one handler. Otherwise: general.")
    raise ValueError(f"unknown demo strategy {kind!r}; choose one of {', '.join(STRATEGIES)}")


class RouterReflector:
    """A scripted reflector: right most of the time, misleading some of the time, deterministic."""

    def __init__(self, kind: str = "append", *, seed: int = 0, noise: float = 0.25, silence: float = 0.1) -> None:
        self.kind, self.seed, self.noise, self.silence = kind, seed, noise, silence
        self._attempts = Attempts()  # a model asked again may answer otherwise

    def __call__(self, rendered: Any, task: Task, output: str, reward: float) -> str | None:
        if reward >= 1.0:
            return None
        misfire = self._misfiring_rule(rendered, task, output)
        if misfire is not None:
            return misfire
        if task.gold is None:
            raise ValueError(f"task {task.id!r} names no handler (its gold): RouterReflector reflects on router_tasks(), "
                             "whose tasks each name one")
        if task.gold == DEFAULT_HANDLER:
            return None
        roll = self._rng(rendered, task).random()
        words = re.findall(r"\w+", task.prompt.lower())
        if roll < self.silence:
            return None
        if roll < self.silence + self.noise:
            keyword = next(w for w in words if w in FILLERS)  # fixes this request, breaks others
        else:
            keyword = next(w for w in words if w in SIGNALS[task.gold])
        return self._format(rendered, keyword, task.gold)

    def _rng(self, rendered: str, task: Task) -> random.Random:
        attempt = self._attempts.next((task.id, rendered))
        digest = hashlib.sha256(f"{self.seed}|{task.id}|{attempt}|{rendered}".encode("utf-8")).hexdigest()
        return random.Random(digest)

    def _misfiring_rule(self, rendered: str, task: Task, output: str) -> str | None:
        """A rule sent this request to the wrong handler: propose dropping that rule."""
        if output == DEFAULT_HANDLER or self.kind == "single":
            return None
        words = set(re.findall(r"\w+", task.prompt.lower()))
        keyword = next((k for k, h in routing_rules(rendered) if k in words), None)
        if keyword is None:  # no rule sent it there: an output of another run's making
            return None
        if self.kind == "append":
            return f"remove: {rule_text(keyword, output)}"
        kept = [k for k, h in routing_rules(rendered) if h == output and k != keyword]
        return f"{output}: {', '.join(kept)}"

    def _format(self, rendered: str, keyword: str, handler: str) -> str:
        if self.kind != "keyed":
            return rule_text(keyword, handler)
        have = [k for k, h in routing_rules(rendered) if h == handler]
        return f"{handler}: {', '.join(have + [keyword])}"


# The same domain as models a run spec can name (text in, text out), so that a detached run of the
# run store can evolve it too: `agent: python:agentdescent.testing:route_prompt`,
# `reflector: python:agentdescent.testing:RouterReflectorModel`, on a text target holding the header.

_CASE = re.compile(r"<instructions>\n(.*?)\n</instructions>.*?<task>\n(.*?)\n</task>\n<answer>\n(.*?)\n</answer>\n"
                   r"<expected>\n(.*?)\n</expected>", re.DOTALL)


def route_prompt(prompt: str) -> str:
    """`route` for a prompt that is the artifact, a blank line, then the request."""
    rendered, _, request = prompt.rpartition("\n\n")
    return route(rendered, Task(id="-", prompt=request))


class RouterReflectorModel:
    """`RouterReflector` reading the reflection prompt a model would get, answering as a model would."""

    def __init__(self, seed: int = 0, noise: float = 0.25) -> None:
        self._reflect = RouterReflector("append", seed=seed, noise=noise)

    def __call__(self, prompt: str) -> str:
        case = _CASE.search(prompt)
        if case is None:
            return "NONE"
        rendered, request, answer, expected = case.groups()
        task_id = hashlib.sha256(request.encode("utf-8")).hexdigest()[:8]
        rule = self._reflect(rendered, Task(id=task_id, prompt=request, gold=expected), answer, 0.0)
        return "NONE" if rule is None else f"<rule>{rule}</rule>"
