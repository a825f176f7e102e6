"""Tensor-parallel runs: the artifact's keys dealt out to the workers, one shard each, and each
task routed to the shard that can fix it.

The key space is the strategy's `key_space(state)` (KeyedRules' categories, a FileTree's files),
less the keys governance lets no diff change; it is dealt round-robin, and a key that appears
later (a file a diff creates) belongs to the worker its name hashes to. Shards are disjoint, so
two workers' diffs never touch one key and the aggregator has no conflict to resolve.

A task goes to the shard of the key `route(task)` names when the caller gave a routing function;
else to the shard that fixed it last: a committed diff teaches that its tasks are fixed by its
keys, and a proposal that reached outside its worker's shard (refused: `invalid`) teaches where
its task belongs. A task with no route yet may go to any worker.

What it leaves out: dealing minibatches (the sampler asks `eligible`), judging diffs.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Collection, Iterable, Mapping, Sequence

from agentdescent.artifacts.strategies import kind_of
from agentdescent.engine.loop.parallel import RouteFn
from agentdescent.errors import UserError
from agentdescent.governance import Governance
from agentdescent.types import Diff, Task


class Shards:
    def __init__(self, keys: Sequence[str], n_workers: int, route: RouteFn | None = None) -> None:
        self._owner = {key: i % n_workers for i, key in enumerate(keys)}
        self._n = n_workers
        self._route = route
        self._routes: dict[str, int] = {}  # task id -> worker, learned
        self._asked: dict[str, int | None] = {}  # task id -> worker, as `route` says (None: it does not know)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, strategy: object, state: Mapping[str, str], governance: Governance, n_workers: int,
           route: RouteFn | None) -> Shards:
        """The shards of `strategy`'s keys for `n_workers`; a `UserError` when they cannot be cut."""
        name = kind_of(strategy)
        key_space = getattr(strategy, "key_space", None)
        if key_space is None:
            raise UserError(f"parallel='tp' deals the artifact's keys out to the workers, and {name} does not say "
                            "what its keys are: give it a key_space(state) method returning them, or use "
                            "parallel='dp'")
        keys = key_space(state)
        if keys is None:
            raise UserError(f"parallel='tp' deals the artifact's keys out to the workers, but {name}'s keys cannot "
                            "be known in advance (a rule's key is the hash of a rule not yet written): use "
                            "KeyedRules (one key per category) or a FileTree, or parallel='dp'")
        editable = governance.changeable(keys)
        if len(editable) < n_workers:
            shown = ", ".join(editable[:8]) + (", ..." if len(editable) > 8 else "")
            raise UserError(f"parallel='tp' gives each of the {n_workers} workers keys of its own, but {name} has "
                            f"{len(editable)} key(s) a diff may change ({shown or 'none'}): use n_workers={len(editable)} "
                            "or fewer, or parallel='dp'" if editable else
                            f"parallel='tp' needs keys a diff may change, and {name} has none: every key is "
                            "frozen or read-only")
        return cls(editable, n_workers, route)

    def owner(self, key: str) -> int:
        """The worker whose shard holds `key` (a key not dealt out: by its name's hash)."""
        known = self._owner.get(key)
        return known if known is not None else zlib.crc32(key.encode("utf-8")) % self._n

    def outside(self, worker: int, keys: Iterable[str]) -> list[str]:
        """The keys of `keys` that are not in `worker`'s shard."""
        return sorted(k for k in keys if self.owner(k) != worker)

    def keys_of(self, worker: int) -> list[str]:
        return [k for k, owner in self._owner.items() if owner == worker]

    def eligible(self, worker: int, tasks: Sequence[Task]) -> list[Task]:
        """The tasks of `tasks` that `worker` may be dealt: routed to its shard, or not routed yet."""
        return [t for t in tasks if self._route_of(t) in (None, worker)]

    def learn(self, task_ids: Iterable[str], keys: Collection[str]) -> None:
        """Diffs of `keys` fix the tasks `task_ids`: route them to the shard that holds those keys
        (the caller's `route` has the last word where it names one)."""
        owners = {self.owner(k) for k in keys}
        if len(owners) != 1:
            return  # a diff across shards (possible only before tp: a resumed ledger) teaches nothing
        worker = owners.pop()
        with self._lock:
            for task_id in task_ids:
                self._routes[task_id] = worker

    def learn_from(self, landed: Iterable[Diff]) -> None:
        """Committed diffs: each one's tasks go to its keys' shard."""
        for diff in landed:
            self.learn(diff.evidence.task_ids, diff.keys)

    @property
    def routes(self) -> dict[str, int]:
        with self._lock:
            return dict(self._routes)

    def restore(self, routes: Mapping[str, int]) -> None:
        """Take up the routes a checkpoint kept (a resumed run)."""
        with self._lock:
            self._routes.update({t: w for t, w in routes.items() if 0 <= w < self._n})

    def _route_of(self, task: Task) -> int | None:
        with self._lock:
            known = task.id in self._asked
        if not known:  # the caller's function runs outside the lock: it may be slow
            asked = self._ask(task)
            with self._lock:
                self._asked[task.id] = asked
        with self._lock:
            asked = self._asked[task.id]
            return asked if asked is not None else self._routes.get(task.id)

    def _ask(self, task: Task) -> int | None:
        """The caller's route for `task`, asked once (the sampler looks at every task each deal)."""
        key = self._route(task) if self._route is not None else None
        if key is not None and not isinstance(key, str):
            raise UserError(f"route(task {task.id}) must return a key (text) or None; got {type(key).__name__}")
        return None if key is None else self.owner(key)
