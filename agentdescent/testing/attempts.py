"""How many times a stand-in model was asked the same before: what lets it answer otherwise when
asked again, yet the same for a seed.

`Attempts().next(key)` counts under a lock (the calls come from a pool of threads); a copy sent
to another process counts its own. Each stand-in seeds its own generator from the count.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable
from typing import Any


class Attempts:
    def __init__(self) -> None:
        self._asked: Counter[Hashable] = Counter()
        self._lock = threading.Lock()

    def next(self, key: Hashable) -> int:
        """How many times `key` was asked before this time: 0 the first."""
        with self._lock:
            attempt = self._asked[key]
            self._asked[key] += 1
        return attempt

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())
