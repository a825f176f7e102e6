"""A long run's costs as it grows: the ledger on disk, the checkpoint's writes, the journals, time a round.

Two parts, each at several lengths (default 50, 200 and 800):

- `ledger`: N commits straight to a `Ledger` of a skill folder, its SKILL.md a rule longer each
  commit and its 20 reference files unchanged. Printed: the ledger's size on disk (blocks, as `du`
  counts them), its objects loose and packed, and ms per commit over the first and the last tenth.
- `run`: a real `evolve()` of N rounds, 2 workers, on a domain that commits about a rule a round
  (a rule routes one word; four tasks a word; rollouts instant, so the bookkeeping is all there is).
  Printed: the versions committed, the ledger's objects and their size on disk, the checkpoint's
  size at the end and the bytes all its writes took, the journals' sizes, and a round's wall and
  CPU time (the process's, every thread) over the first and the last tenth of rounds, with the
  part of the wall time spent writing checkpoints and committing to the ledger.

Run: python bench/long_run.py [--lengths 50 200 800] [--parts ledger run]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import Task, evolve  # noqa: E402
from agentdescent import events as ev  # noqa: E402
from agentdescent.engine.persist.checkpoint import RunFiles  # noqa: E402
from agentdescent.ledger import Ledger  # noqa: E402

MB = 1 << 20


def on_disk(folder: Path) -> int:
    """Bytes the folder takes on disk, its directories included (`du`'s count)."""
    total = os.lstat(folder).st_blocks * 512
    for root, dirs, files in os.walk(folder):
        total += sum(os.lstat(os.path.join(root, name)).st_blocks * 512 for name in dirs + files)
    return total


def objects(ledger: Path) -> str:
    """`git count-objects -v` in one line: loose objects and packed ones."""
    counted = dict(line.split(": ") for line in subprocess.run(
        ["git", "count-objects", "-v"], cwd=ledger, capture_output=True, text=True, check=True).stdout.splitlines())
    return f"{counted['count']} loose + {counted['in-pack']} packed in {counted['packs']} packs"


def tenths(values: list[float], of: Callable[[list[float]], float] = statistics.median) -> tuple[float, float]:
    """The median (or `of`) of the first and of the last tenth of `values`."""
    tenth = max(1, len(values) // 10)
    return of(values[:tenth]), of(values[-tenth:])


def ledger_part(n: int, folder: Path) -> None:
    ledger = Ledger(folder / "ledger")
    state = {"SKILL.md": "# Router\n", **{f"references/r{i:02d}.md": f"reference {i}\n" * 40 for i in range(20)}}
    version = ledger.commit("skill", state, expected_version=0, message="seed")
    times = []
    for k in range(n):
        state["SKILL.md"] += f"- when a request names word{k}, send it to handler h{k % 5} and quote the word back.\n"
        start = time.perf_counter()
        version = ledger.commit("skill", state, expected_version=version, message=f"step {k}")
        times.append(time.perf_counter() - start)
    ledger.close()
    first, last = tenths(times)
    print(f"ledger, {n} commits (SKILL.md {len(state['SKILL.md']) / 1024:.0f} KB): {on_disk(ledger.path) / MB:.2f} MB "
          f"on disk, {objects(ledger.path)}; ms per commit {first * 1000:.1f} first tenth, {last * 1000:.1f} last "
          f"(medians), {max(times) * 1000:.0f} the slowest, {sum(times) * 1000 / n:.1f} the mean")


def _word(task: Task) -> str:
    return re.search(r"word\d+", task.prompt).group()  # type: ignore[union-attr]


def route(rendered: str, task: Task) -> str:
    found = re.search(rf"names {_word(task)}, send it to handler (h\d)", rendered)
    return found.group(1) if found else "general"


def reward(task: Task, output: str) -> float:
    return 1.0 if output == task.gold else 0.0


def propose(rendered: str, task: Task, output: str, score: float) -> str:
    word = _word(task)
    return f"when a request names {word}, send it to handler {task.gold} and quote the word back to the user."


class Timed:
    """The calls of one method while the block runs: how many, the wall time they took, and with
    `size` (a function of the call's arguments) the bytes each left."""

    def __init__(self, owner: type, name: str, size: Callable[..., int] | None = None) -> None:
        self.count, self.bytes, self.seconds = 0, 0, 0.0
        self._owner, self._name, self._size, self._kept = owner, name, size, getattr(owner, name)

    def __enter__(self) -> Timed:
        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return self._kept(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.count += 1
                self.bytes += self._size(*args) if self._size else 0
        setattr(self._owner, self._name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self._owner, self._name, self._kept)


def run_part(n: int, folder: Path) -> None:
    tasks = [Task(id=f"t{i}", prompt=f"a request about word{i // 4}", gold=f"h{i // 4 % 5}") for i in range(8 * n)]
    rounds: list[tuple[float, ...]] = []  # wall, CPU, checkpoint writes and ledger commits of each round
    mark = [0.0] * 4

    def now() -> list[float]:
        return [time.perf_counter(), time.process_time(), saves.seconds, commits.seconds]

    def on_event(event: object) -> None:
        if isinstance(event, ev.RoundStarted):
            mark[:] = now()
        elif isinstance(event, ev.RoundEnded):
            rounds.append(tuple(b - a for a, b in zip(mark, now(), strict=True)))

    store = folder / "ledger"
    with Timed(RunFiles, "save", lambda files, _: files.checkpoint_path.stat().st_size) as saves, \
            Timed(Ledger, "commit") as commits:
        result = evolve(tasks, reward, run=route, propose=propose, rounds=n, n_workers=2, max_concurrency=4,
                        store=store, on_event=on_event)
    run_files = RunFiles(store)
    sizes = {path.name: path.stat().st_size for path in (run_files.checkpoint_path, run_files.rollouts_path,
                                                         run_files.answers_path)}
    wall, cpu = (tenths([r[i] for r in rounds]) for i in range(2))
    kept, committed = (tenths([r[i] for r in rounds], statistics.mean) for i in range(2, 4))  # not every round commits
    print(f"run, {n} rounds ({result.version} versions, {len(rounds)} rounds timed): git objects "
          f"{on_disk(store / 'objects') / MB:.2f} MB on disk, {objects(store)}; checkpoint "
          f"{sizes['checkpoint.json'] / 1024:.0f} KB, {saves.count} writes of {saves.bytes / MB:.1f} MB in all; "
          f"rollouts.jsonl {sizes['rollouts.jsonl'] / MB:.2f} MB, answers.jsonl {sizes['answers.jsonl'] / MB:.2f} MB")
    print(f"  a round, first tenth -> last tenth: wall {wall[0] * 1000:.0f} -> {wall[1] * 1000:.0f} ms, CPU "
          f"{cpu[0] * 1000:.0f} -> {cpu[1] * 1000:.0f} ms (medians); of the wall (means): checkpoint writes {kept[0] * 1000:.1f} -> "
          f"{kept[1] * 1000:.1f} ms, ledger commits {committed[0] * 1000:.1f} -> {committed[1] * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[50, 200, 800], help="commits (ledger), rounds (run)")
    parser.add_argument("--parts", nargs="+", choices=("ledger", "run"), default=["ledger", "run"])
    args = parser.parse_args()
    for part in args.parts:
        for n in args.lengths:
            with tempfile.TemporaryDirectory() as tmp:
                (ledger_part if part == "ledger" else run_part)(n, Path(tmp))
    print(f"load average over the last 1 / 5 / 15 minutes: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
