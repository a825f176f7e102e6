"""Folder artifacts: what a rollout's workspace costs, and N workers against one on a skill folder.

1. `load_tree` of a 50-file skill, and set-up and teardown of one rollout's workspace for a 50-file skill (`tree_runner`, layout
   claude_skill, the overlay written, an agent that answers at once): the median per rollout of
   a new candidate (staged from scratch, removed after), and of a candidate already staged (the
   clean workspace of its last rollout reused).
2. The example skill (`examples/skills/support-router`) evolved to held-out 1.0 by the offline
   agent and reflector of `examples/skill_dir_evolution.py`, each call sleeping `--latency-ms`
   (100 ms: a fast CLI agent turn), with 1 worker and with `--workers` (4): time, rounds and
   calls of each, and their ratio. Both sides get the same call concurrency.
3. With `--noise`, the same skill where a rollout is a sample: the agent answers as the routing
   files say with probability `--p` where they route the request right and with `--q` where not
   (else it answers otherwise), the grader flips a reward with `--flip`, and the reflector adds
   a filler word (one that fixes its request and breaks others: harmful) with `--harm` and
   nothing with `--vague`. Runs go `--noisy-rounds` rounds (a noisy held-out reward seldom reads
   1.0); quality is read on ground truth, from the files the result holds: signal words listed
   under their team (of 20), filler words kept, and the share of all tasks the files route right.

Run: python bench/tree_rollout.py [--files 50] [--workers 4] [--seeds 0 1 2] [--latency-ms 100] [--concurrency 32]
     [--workdir /dev/shm] [--rounds 100] [--repeats 200]
     python bench/tree_rollout.py --noise [--p 0.85] [--q 0.1] [--flip 0.05] [--harm 0.15] [--vague 0.25]
     [--noisy-rounds 12] [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import FileTree, Task, load_tree, tree_runner  # noqa: E402
from agentdescent.agents import scripted  # noqa: E402
from agentdescent.testing import SKILL_NAME, SkillReflector, route_by_skill, routing_truth, sampled  # noqa: E402
from agentdescent.testing.attempts import Attempts  # noqa: E402
from examples.skill_dir_evolution import SKILL, evolve_skill, skill_tasks  # noqa: E402


def load_ms(n_files: int, repeats: int) -> float:
    """load_tree of a skill folder of `n_files` files on disk, the median of `repeats` reads."""
    with tempfile.TemporaryDirectory(prefix="tree-load-") as tmp:
        for i in range(n_files):
            path = Path(tmp, "references" if i else "", f"part-{i:03d}.md" if i else "SKILL.md")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("A line of reference text.\n" * 40, encoding="utf-8")
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            load_tree(tmp)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def workspace_ms(n_files: int, workdir: str | None, repeats: int = 200) -> tuple[float, float]:
    tree = {"SKILL.md": "---\nname: bench\ndescription: a skill of many files\n---\n# Bench\n", "hooks/pre.sh": "exit 0\n"}
    tree.update({f"references/part-{i:03d}.md": f"# Part {i}\n" + "A line of reference text.\n" * 40
                 for i in range(n_files - len(tree))})
    strategy = FileTree(tree, frozen=["hooks/*"])
    run = tree_runner(scripted(lambda prompt, cwd: "ok"), layout="claude_skill", name="bench",
                      overlay=strategy.frozen_files(tree), workdir=workdir)
    task = Task(id="t", prompt="go")
    fresh, again = [], []
    for i in range(repeats):
        candidate = {**tree, "SKILL.md": tree["SKILL.md"] + f"revision {i}\n"}
        for times in (fresh, again):
            start = time.perf_counter()
            run(candidate, task)
            times.append(time.perf_counter() - start)
    run.close()
    return 1000 * statistics.median(fresh), 1000 * statistics.median(again)


def evolution(workers: int, seed: int, latency: float, concurrency: int, rounds: int, workdir: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="tree-bench-") as tmp:
        folder = Path(tmp) / "support-router"
        shutil.copytree(SKILL, folder)
        start = time.perf_counter()
        result = evolve_skill(folder, workers=workers, rounds=rounds, seed=seed, latency=latency, store=Path(tmp) / "ledger",
                              max_concurrency=concurrency, workdir=workdir)
        wall = time.perf_counter() - start
    accept = statistics.mean(h.timings["accept"] for h in result.history)
    return {"wall": wall, "rounds": len(result.history), "calls": result.usage.calls, "reward": result.final_reward,
            "round_s": wall / len(result.history), "accept_s": accept}


@dataclass(frozen=True, kw_only=True)
class Noise:
    p: float
    q: float
    flip: float
    harm: float
    vague: float


class NoisyRouter:
    """The offline agent and grader of the skill, each a sample: every draw comes from a stream
    seeded by the seed, what was asked and how many times it was asked before."""

    def __init__(self, tasks: list[Task], noise: Noise, seed: int, latency: float) -> None:
        self.gold = {task.prompt: task.gold for task in tasks}
        self.noise, self.seed, self.latency = noise, seed, latency
        self._asked = Attempts()

    def _rng(self, *key: str) -> random.Random:
        digest = hashlib.sha256("\0".join(key).encode("utf-8")).hexdigest()
        return random.Random(f"{self.seed}|{digest}|{self._asked.next(digest)}")

    def agent(self, prompt: str, cwd: str) -> str:
        answer = route_by_skill(prompt, cwd, self.latency)
        gold = self.gold[prompt.rsplit("\n\n", 1)[-1]]
        routing = "".join(sorted(p.read_text(encoding="utf-8") for p in Path(cwd, ".claude/skills", SKILL_NAME,
                                                                            "routing").glob("*.md")))
        return sampled(answer, gold, self._rng("agent", prompt, routing).random(), p=self.noise.p, q=self.noise.q)

    def reward(self, task: Task, output: str) -> float:
        right = float(output.strip().lower() == task.gold)
        return 1.0 - right if self._rng("grade", task.id, output).random() < self.noise.flip else right


def noisy_evolution(workers: int, seed: int, noise: Noise, rounds: int, latency: float, concurrency: int) -> dict:
    """The quickstart's run for `rounds` rounds with the noisy agent, grader and reflector; ground truth."""
    tasks = skill_tasks(seed)
    router = NoisyRouter(tasks, noise, seed, latency)
    with tempfile.TemporaryDirectory(prefix="tree-noisy-") as tmp:
        folder = Path(tmp) / "support-router"
        shutil.copytree(SKILL, folder)
        start = time.perf_counter()
        result = evolve_skill(folder, workers=workers, rounds=rounds, seed=seed, store=Path(tmp) / "ledger",
                              max_concurrency=concurrency, agent=router.agent, reward=router.reward, target_reward=None,
                              reflect_with=SkillReflector(seed, noise=noise.harm, silence=noise.vague, latency=latency))
        wall = time.perf_counter() - start
    truth = routing_truth(result.state, tasks)
    return {"wall": wall, "rounds": len(result.history), "calls": result.usage.calls, "measured": result.final_reward,
            "learnt": truth.learnt, "fillers": truth.fillers, "true": truth.right}


def noisy_table(args: argparse.Namespace) -> None:
    noise = Noise(p=args.p, q=args.q, flip=args.flip, harm=args.harm, vague=args.vague)
    print(f"noisy skill folder: {noise}, {args.noisy_rounds} rounds, {args.latency_ms:g} ms a call")
    rows = {}
    for workers in (1, args.workers):
        runs = [noisy_evolution(workers, seed, noise, args.noisy_rounds, args.latency_ms / 1000, args.concurrency)
                for seed in args.seeds]
        for seed, run in zip(args.seeds, runs):
            print(f"  N={workers} seed {seed}: {run['rounds']} rounds, {run['calls']} calls, {run['wall']:.1f} s; "
                  f"learnt {run['learnt']}/20, fillers kept {run['fillers']}, routes right {run['true']:.2f}, "
                  f"measured held-out {run['measured']:.2f}")
        rows[workers] = runs
    print("| N | calls | seconds | words learnt of 20 | runs keeping a filler | fillers kept, all runs | routed right (truth) |")
    print("|---|---|---|---|---|---|---|")
    for workers, runs in rows.items():
        def med(name: str) -> float:
            return statistics.median(r[name] for r in runs)
        kept = sum(r["fillers"] > 0 for r in runs)
        print(f"| {workers} | {med('calls'):.0f} ({min(r['calls'] for r in runs)}-{max(r['calls'] for r in runs)}) | "
              f"{med('wall'):.1f} | {med('learnt'):.1f} ({min(r['learnt'] for r in runs)}-"
              f"{max(r['learnt'] for r in runs)}; mean {statistics.mean(r['learnt'] for r in runs):.1f}) | {kept} of "
              f"{len(runs)} | {sum(r['fillers'] for r in runs)} | {med('true'):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight, both sides (evolve's default: 32)")
    parser.add_argument("--rounds", type=int, default=100, help="most rounds a run may take (it stops at held-out 1.0)")
    parser.add_argument("--repeats", type=int, default=200, help="workspaces timed in part 1")
    parser.add_argument("--workdir", action="append", default=None,
                        help="where workspaces go (repeatable for part 1; part 2 uses the first; default: the system's "
                             "temporary folder)")
    parser.add_argument("--noise", action="store_true", help="part 3 only: the skill where a rollout is a sample")
    parser.add_argument("--p", type=float, default=0.85, help="--noise: the agent right where the files route right")
    parser.add_argument("--q", type=float, default=0.1, help="--noise: the agent right where they do not")
    parser.add_argument("--flip", type=float, default=0.05, help="--noise: the grader flips a reward")
    parser.add_argument("--harm", type=float, default=0.15, help="--noise: the reflector adds a filler word")
    parser.add_argument("--vague", type=float, default=0.25, help="--noise: the reflector proposes nothing")
    parser.add_argument("--noisy-rounds", type=int, default=12)
    args = parser.parse_args()
    if args.noise:
        noisy_table(args)
        return
    print(f"load_tree of a {args.files}-file skill: median {load_ms(args.files, args.repeats):.2f} ms")
    for workdir in args.workdir or [None]:
        where = workdir or tempfile.gettempdir()
        fresh, again = workspace_ms(args.files, workdir, args.repeats)
        print(f"workspace set-up and teardown, {args.files}-file skill, in {where}: median {fresh:.1f} ms a rollout "
              f"of a new candidate, {again:.1f} ms of one already staged")
    ratios = []
    for seed in args.seeds:
        workdir = (args.workdir or [None])[0]
        one = evolution(1, seed, args.latency_ms / 1000, args.concurrency, args.rounds, workdir)
        many = evolution(args.workers, seed, args.latency_ms / 1000, args.concurrency, args.rounds, workdir)
        ratios.append(one["wall"] / many["wall"])
        print(f"seed {seed}: 1 worker {one['wall']:.2f} s, {one['rounds']} rounds, {one['calls']} calls, reward "
              f"{one['reward']:.2f} | {args.workers} workers {many['wall']:.2f} s, {many['rounds']} rounds, "
              f"{many['calls']} calls, reward {many['reward']:.2f} | speed-up {ratios[-1]:.1f}x | a round "
              f"{one['round_s']:.2f} s vs {many['round_s']:.2f} s, of which the acceptance test {one['accept_s']:.2f} s "
              f"vs {many['accept_s']:.2f} s")
    print(f"skill folder to held-out 1.0, {args.workers} workers vs 1: median {statistics.median(ratios):.1f}x "
          f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x) over seeds {args.seeds}")


if __name__ == "__main__":
    main()
