"""Group testing: which members of a set cause a failure that the set as a whole shows.

The optimizer step fuses every surviving diff of a round into one candidate; when that candidate
breaks a task head passes, the culprits are found by splitting the set and testing each half
alone on that task (one rollout a question, the parts of a level at once). `culprits` is the
search for one failure, written as a generator so that many searches (one per regressed task)
run in lockstep and each level of questions is one wave of rollouts (`search_all`). With b
culprits among k members that act alone, a search asks about 2·b·log₂k questions in log₄k
waves; members that break the task only together (no part alone does) come back as one group.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

# yields subsets to test together; is sent, for each, whether it fails; returns the culprit groups
Search = Generator[list[list[T]], list[bool], list[list[T]]]


def culprits(members: Sequence[T], arity: int = 4) -> Search[T]:
    """The groups of `members` that fail on their own, given that all of them together fail.

    Each level splits the members into `arity` parts, asked about at once: four parts cost the
    same questions as halving twice (2·log₂k a culprit) in half the waves."""
    if len(members) <= 1:
        return [list(members)]
    size = -(-len(members) // arity)
    parts = [list(members[i:i + size]) for i in range(0, len(members), size)]
    fails = yield parts
    found: list[list[T]] = []
    for part, failed in zip(parts, fails):
        if failed:
            found += yield from culprits(part, arity)
    return found or [list(members)]  # no part fails alone: they fail together


def search_all(searches: Mapping[K, Search[T]], ask: Callable[[list[tuple[K, list[T]]]], list[bool]]) -> dict[K, list[list[T]]]:
    """Run every search to its end; `ask` answers one wave of (search key, subset) questions at once."""
    found: dict[K, list[list[T]]] = {}
    pending: dict[K, list[list[T]]] = {}
    for key, search in searches.items():
        _advance(key, search, None, pending, found)
    while pending:
        wave = [(key, subset) for key, subsets in pending.items() for subset in subsets]
        answers = iter(ask(wave))
        asked, pending = pending, {}
        for key, subsets in asked.items():
            _advance(key, searches[key], [next(answers) for _ in subsets], pending, found)
    return found


def _advance(key: K, search: Search[T], answers: list[bool] | None, pending: dict[K, list[list[T]]],
             found: dict[K, list[list[T]]]) -> None:
    try:
        pending[key] = search.send(answers) if answers is not None else next(search)
    except StopIteration as done:
        found[key] = done.value
