"""EvolveResult: the learned artifact, how it was reached, and an opt-in write-back."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agentdescent import atomic
from agentdescent.engine.evaluation import Usage
from agentdescent.errors import UserError
from agentdescent.governance import is_frozen, unsafe_key_reason
from agentdescent.ledger import Ledger
from agentdescent.types import Outcome


class StepRecord(BaseModel):
    """One round of the loop: what was proposed, what landed, and what it measured."""

    round: int
    base_version: int
    version: int | None
    diffs: list[str] = Field(default_factory=list)
    outcomes: dict[str, int] = Field(default_factory=dict)
    staleness: list[int] = Field(default_factory=list)
    acceptance_head: float | None = None
    acceptance_candidate: float | None = None
    held_out: float | None = None
    promoted: bool = False
    calls: int = 0
    timings: dict[str, float] = Field(default_factory=dict)


@dataclass(kw_only=True)
class EvolveResult:
    """What a run learned and how: plain data, so that it can be pickled, stored and sent to
    another process. The ledger is a path; `ledger` opens it."""

    rendered: Any  # what `run` receives for the final artifact: text, or {path: text} for trees
    state: dict[str, str]
    final_reward: float  # held-out reward of the final (stable) artifact
    initial_reward: float  # held-out reward before any change
    history: list[StepRecord]
    ledger_path: Path
    outcome_list: list[Outcome]
    usage: Usage
    stop_reason: str
    version: int  # the ledger version the final artifact is at (stable)
    initial_version: int  # the stable version the run started from
    initial_state: dict[str, str] = field(default_factory=dict)  # the artifact at `initial_version`
    frozen: tuple[str, ...] = field(default=())

    @property
    def ledger(self) -> Ledger:
        """The run's git ledger, opened now: `with result.ledger as ledger: ...` closes its git
        processes when done."""
        return Ledger(self.ledger_path)

    def outcomes(self) -> dict[str, int]:
        """How many diffs ended each way: {"committed": 3, "rejected_by_test": 5, ...}."""
        return dict(Counter(o.kind for o in self.outcome_list))

    def write_to(self, path: str | os.PathLike) -> Path | None:
        """Write the artifact to `path`, backing up what is there first. A text artifact becomes
        one file; a tree is written file by file under the folder, frozen files untouched. Every
        file is written atomically. Returns the backup's path (None when nothing existed)."""
        target = Path(path)
        if isinstance(self.rendered, str):
            backup = _backup(target)
            atomic.write_text(target, self.rendered)
            return backup
        if isinstance(self.rendered, dict):
            return self._write_tree(target)
        raise UserError(f"cannot write a {type(self.rendered).__name__} artifact; write result.rendered yourself")

    def _write_tree(self, root: Path) -> Path | None:
        if root.exists() and not root.is_dir():
            raise UserError(f"{root} is a file; write_to needs a folder for a tree artifact")
        inside = root.resolve()
        for key in self.rendered:
            reason = unsafe_key_reason(key)
            if not reason and not (root / key).resolve().is_relative_to(inside):
                reason = f"{key!r} leads through a symlink out of the folder"
            if reason:
                raise UserError(f"refusing to write outside {root}: {reason}")
        backup = _backup(root)
        for key, text in self.rendered.items():
            if not is_frozen(key, self.frozen):
                atomic.write_text(root / key, text)
        return backup


def _backup(target: Path) -> Path | None:
    if not target.exists():
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = target.with_name(f"{target.name}.bak-{stamp}")
    n = 1
    while backup.exists():
        backup = target.with_name(f"{target.name}.bak-{stamp}-{n}")
        n += 1
    if target.is_dir():
        shutil.copytree(target, backup, symlinks=True)
    else:
        shutil.copy2(target, backup)
    return backup
