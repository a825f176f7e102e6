"""The gate under noise, judged on ground truth: what each system pays in calls and what it really
learns on the noisy reference domain (agentdescent/testing/noisy.py), with peers side by side.

The domain: 8 categories of 6 tasks and 12 plain tasks; a task passes with probability p when the
playbook states its category's rule and q when not, the grader flips a reward with `flip`, and
the reflector proposes the right rule with `right`, a vague one with `vague`, a harmful one (it
fixes its own category and breaks others: see noisy.py) with the rest, and words a right rule
another way with `reword` (a playbook that then states one rule twice is longer for nothing). Every rollout sleeps
`--rollout-ms` and every reflection `--reflect-ms` before the domain answers. Every system of a seed works on the
same split: the one `evolve` makes itself (held_out_frac 0.3: 42 train, 18 held-out tasks, drawn
by `split_tasks` with `random.Random(f"{seed}:split")`), and on a fresh `NoisyDomain` per run.

- ours: `evolve` with `AppendRules`, N workers, `--rounds` rounds, its defaults otherwise.
  Calls are `result.usage.calls` (split by purpose with --verbose), duplicates the diffs that
  ended "duplicate".
- gepa: GEPA 0.1.4 through its adapter API (bench/peers/gepa_noisy.py), in its own venv,
  bench/.gepa-venv, made here on first use (never a dependency of agentdescent); trainset the
  train split, valset the held-out split, `max_metric_calls` `--gepa-budget`. Calls are counted
  in the adapter: rollouts and reflections. Its quality is that of `result.best_candidate`. It
  does not depend on N: one run per seed, shown under each N.
- oracle: the bound (bench/peers/oracle_noisy.py): the rollouts and distinct reflections an
  ideal gate that knows which proposal is right would still pay. Its seconds are its own
  compute, with no latency: it is a count, not a run.

Ground truth, for every system's result: rules learnt (of 8, in any wording), harmful and vague
rules kept, and rules restated (a second wording of a right rule the result holds:
`NoisyDomain.truth`), and the true expected held-out reward (`NoisyDomain.expected` on the
held-out split: flips included, so 1 - flip at best). "measured" is what the system itself
measured on the held-out split, before -> after (gepa: the seed's and the best candidate's
valset score).

Printed, for each combination of levels (their product) and each N: one row per system, calls
median (min-max), learnt median (min-max), runs with a harmful rule kept (k of n, and the most in
one run), vague kept and restated medians, duplicates median (ours), true and measured held-out reward
medians, seconds median; then the ratios of median calls ours/oracle and ours/gepa.

Run: python bench/noisy_gate.py                                   # noisy defaults, N=8, seeds 0..4
     python bench/noisy_gate.py --seeds 0 1 --workers 8
     python bench/noisy_gate.py --clean --seeds 0 1 --workers 1 8  # p=1 q=0 flip=0 right=1 vague=0
     python bench/noisy_gate.py --p 0.85 0.95 --right 0.4 0.6 --systems ours oracle --verbose
     python bench/noisy_gate.py --flip 0 0.05 --gepa-budget 600
     python bench/noisy_gate.py --clean --reword 0 0.5 --workers 8 --systems ours oracle
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from peers.oracle_noisy import oracle_run  # noqa: E402

from agentdescent import AppendRules, events, evolve  # noqa: E402
from agentdescent.engine.split import split_tasks  # noqa: E402
from agentdescent.testing.noisy import NoisyDomain, NoisyLevels  # noqa: E402
from agentdescent.types import Task  # noqa: E402

HELD_OUT_FRAC = 0.3
GEPA_PIN = "gepa==0.1.4"
GEPA_VENV = ROOT / "bench" / ".gepa-venv"
GEPA_PEER = ROOT / "bench" / "peers" / "gepa_noisy.py"
SYSTEMS = ("ours", "gepa", "oracle")
PURPOSES = ("train", "verify", "accept", "validate", "proposals")
EXTRAS = ("reissued", "repeated", "disagreed")  # shown with --verbose when the run's usage has them


def split(levels: NoisyLevels, seed: int) -> tuple[list[Task], list[Task]]:
    """The train / held-out split `evolve` makes of the domain's tasks for this seed."""
    return split_tasks(NoisyDomain(levels, seed=seed).tasks(), HELD_OUT_FRAC, random.Random(f"{seed}:split"))


def judged(domain: NoisyDomain, playbook, held_out: list[Task]) -> dict:
    """Ground truth of a playbook (a state or its rendered text)."""
    truth = domain.truth(playbook)
    return {"learnt": truth.learnt, "harmful": truth.harmful, "vague": truth.vague, "restated": truth.restated,
            "expected": domain.expected(playbook, held_out)}


def run_ours(levels: NoisyLevels, seed: int, n_workers: int, args: argparse.Namespace) -> dict:
    train, held_out = split(levels, seed)
    domain = NoisyDomain(levels, seed=seed)

    def slow_run(rendered, task):
        time.sleep(args.rollout_ms / 1000)
        return domain.run(rendered, task)

    def slow_propose(rendered, task, output, reward):
        time.sleep(args.reflect_ms / 1000)
        return domain.propose(rendered, task, output, reward)

    sizes: list[tuple[int, int]] = []  # the split evolve says it made: the bench's must be the same size

    def check_split(event) -> None:
        if isinstance(event, events.RunStarted):
            sizes.append((event.train, event.held_out))

    with tempfile.TemporaryDirectory(prefix="noisy-gate-ledger-") as store:
        start = time.perf_counter()
        result = evolve(domain.tasks(), domain.reward, run=slow_run, propose=slow_propose, strategy=AppendRules(),
                        n_workers=n_workers, rounds=args.rounds, seed=seed, held_out_frac=HELD_OUT_FRAC, store=store,
                        on_event=check_split)
        seconds = time.perf_counter() - start
    if sizes != [(len(train), len(held_out))]:
        raise SystemExit(f"evolve split the tasks {sizes}, not as the bench did ({len(train)}, {len(held_out)})")
    usage = result.usage.as_record()
    return {"calls": result.usage.calls, "reflections": result.usage.proposals, "seconds": seconds,
            "duplicates": result.outcomes().get("duplicate", 0), "measured": (result.initial_reward, result.final_reward),
            "split": {p: usage[p] for p in (*PURPOSES, *EXTRAS) if p in usage}, "error": result.error,
            **judged(domain, result.state, held_out)}


_GEPA_PYTHON: list[tuple[str | None, str | None]] = []  # made or refused once a process


def gepa_python(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The python of bench/.gepa-venv, made on first use; or None and why it could not be made."""
    if not _GEPA_PYTHON:
        _GEPA_PYTHON.append(_make_gepa_venv(args))
    return _GEPA_PYTHON[0]


def _make_gepa_venv(args: argparse.Namespace) -> tuple[str | None, str | None]:
    python, ready = GEPA_VENV / "bin" / "python", GEPA_VENV / ".ready"
    if ready.exists() and ready.read_text().strip() == GEPA_PIN and python.exists():
        return str(python), None
    if args.no_gepa_install:
        return None, f"no {GEPA_VENV.name} and --no-gepa-install"
    shutil.rmtree(GEPA_VENV, ignore_errors=True)
    start = time.perf_counter()
    steps = {"python -m venv": [sys.executable, "-m", "venv", str(GEPA_VENV)],
             f"pip install {GEPA_PIN}": [str(python), "-m", "pip", "install", "-q", GEPA_PIN],
             "pip install -e (agentdescent)": [str(python), "-m", "pip", "install", "-q", "-e", str(ROOT)]}
    for name, step in steps.items():
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
            return None, f"could not make {GEPA_VENV.name} ({name}): {last}"
    ready.write_text(GEPA_PIN + "\n")
    print(f"made {GEPA_VENV.name} ({GEPA_PIN}, agentdescent editable) in {time.perf_counter() - start:.1f} s", flush=True)
    return str(python), None


def run_gepa(levels: NoisyLevels, seed: int, args: argparse.Namespace) -> dict:
    python, why = gepa_python(args)
    if python is None:
        return {"error": why}
    train, held_out = split(levels, seed)
    ask = {"levels": dataclasses.asdict(levels), "seed": seed, "train": [t.id for t in train],
           "held_out": [t.id for t in held_out], "budget": args.gepa_budget, "rollout_ms": args.rollout_ms,
           "reflect_ms": args.reflect_ms}
    start = time.perf_counter()
    done = subprocess.run([python, str(GEPA_PEER)], input=json.dumps(ask), capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip() or f"exit {done.returncode}").splitlines()[-1]
        return {"error": f"gepa peer failed: {tail}"}
    got = json.loads(lines[-1])
    return {"calls": got["calls"], "reflections": got["reflections"], "seconds": got["seconds"],
            "process_seconds": time.perf_counter() - start, "duplicates": None, "measured": tuple(got["measured"]),
            "metric_calls": got["metric_calls"], "candidates": got["candidates"], "rollouts": got["rollouts"],
            "found_at": got["found_at"],
            **judged(NoisyDomain(levels, seed=seed), got["best"], held_out)}


def run_oracle(levels: NoisyLevels, seed: int, args: argparse.Namespace) -> dict:
    train, held_out = split(levels, seed)
    return oracle_run(levels, seed, train, held_out, args.rounds)


def med(values: list) -> float:
    return statistics.median(values)


def spread(values: list) -> str:
    return f"{med(values):g} ({min(values):g}-{max(values):g})"


def measured(runs: list[dict]) -> str:
    pairs = [r["measured"] for r in runs if None not in r["measured"]]
    if not pairs:
        return "-"
    return f"{med([a for a, _ in pairs]):.2f}->{med([b for _, b in pairs]):.2f}"


def summary_row(system: str, runs: list[dict]) -> str:
    ok = [r for r in runs if not r.get("error") or "calls" in r]
    failed = [r for r in runs if r.get("error")]
    if not ok:
        return f"{system:<7} {failed[0]['error']}"
    harmed = [r["harmful"] for r in ok]
    dups = [r["duplicates"] for r in ok if r["duplicates"] is not None]
    row = (f"{system:<7} {spread([r['calls'] for r in ok]):>18} {spread([r['learnt'] for r in ok]):>10}"
           f" {f'{sum(h > 0 for h in harmed)} of {len(ok)}, max {max(harmed)}':>14} {med([r['vague'] for r in ok]):>6g}"
           f" {med([r['restated'] for r in ok]):>9g}"
           f" {f'{med(dups):g}' if dups else '-':>6} {med([r['expected'] for r in ok]):>8.3f} {measured(ok):>11}"
           f" {med([r['seconds'] for r in ok]):>7.1f}")
    if failed:
        row += f"   ({len(failed)} of {len(runs)} ended with an error: {failed[0]['error']})"
    return row


def verbose_row(system: str, n: int | None, seed: int, r: dict) -> str:
    if "calls" not in r:
        return f"  {system:<7} N={n or '-'} seed {seed}: {r['error']}"
    more = {"ours": lambda: " ".join(f"{p} {n}" for p, n in r["split"].items()) + f", duplicates {r['duplicates']}",
            "gepa": lambda: f"rollouts {r['rollouts']}, GEPA's metric calls {r['metric_calls']}, candidates {r['candidates']},"
                            f" best found at {r['found_at']}",
            "oracle": lambda: f"rollouts {r['rollouts']}"}[system]()
    initial, final = (f"{v:.3f}" if v is not None else "-" for v in r["measured"])
    return (f"  {system:<7} N={n or '-'} seed {seed}: {r['calls']} calls ({more}, reflections {r['reflections']});"
            f" learnt {r['learnt']}/8 harmful {r['harmful']} vague {r['vague']} restated {r['restated']};"
            f" true held-out {r['expected']:.3f},"
            f" measured {initial} -> {final}; {r['seconds']:.1f} s" + (f"; error: {r['error']}" if r.get("error") else ""))


def level_grid(args: argparse.Namespace) -> list[NoisyLevels]:
    if args.clean:
        args.p, args.q, args.flip, args.right, args.vague = [1.0], [0.0], [0.0], [1.0], [0.0]
    grid = []
    for p, q, flip, right, vague, reword in itertools.product(args.p, args.q, args.flip, args.right, args.vague, args.reword):
        if right + vague > 1 + 1e-9:
            raise SystemExit(f"right + vague must be at most 1; got right={right} vague={vague}")
        grid.append(NoisyLevels(p=p, q=q, flip=flip, right=right, vague=vague, reword=reword))
    return grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    levels = NoisyLevels()
    parser.add_argument("--p", type=float, nargs="+", default=[levels.p], help="pass chance with the rule stated")
    parser.add_argument("--q", type=float, nargs="+", default=[levels.q], help="pass chance without it")
    parser.add_argument("--flip", type=float, nargs="+", default=[levels.flip], help="the grader's flip chance")
    parser.add_argument("--right", type=float, nargs="+", default=[levels.right], help="share of right proposals")
    parser.add_argument("--vague", type=float, nargs="+", default=[levels.vague], help="share of vague proposals")
    parser.add_argument("--clean", action="store_true", help="p=1 q=0 flip=0 right=1 vague=0 (overrides the five above)")
    parser.add_argument("--reword", type=float, nargs="+", default=[levels.reword],
                        help="share of right proposals worded another way (also with --clean)")
    parser.add_argument("--workers", type=int, nargs="+", default=[8])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--rollout-ms", type=float, default=20)
    parser.add_argument("--reflect-ms", type=float, default=40)
    parser.add_argument("--gepa-budget", type=int, default=300, help="GEPA's max_metric_calls")
    parser.add_argument("--no-gepa-install", action="store_true", help="do not make bench/.gepa-venv if it is missing")
    parser.add_argument("--verbose", action="store_true", help="print a row for every run")
    args = parser.parse_args()
    grid = level_grid(args)
    per_seed: dict[tuple, dict] = {}  # gepa and oracle runs, which do not depend on N
    for lv in grid:
        for n in args.workers:
            print(f"\np={lv.p:g} q={lv.q:g} flip={lv.flip:g} right={lv.right:g} vague={lv.vague:g} reword={lv.reword:g}"
                  f" (harmful {1 - lv.right - lv.vague:.2f}); N={n}; seeds {' '.join(map(str, args.seeds))};"
                  f" rounds {args.rounds}; gepa budget {args.gepa_budget}", flush=True)
            runs: dict[str, list[dict]] = {s: [] for s in args.systems}
            for seed in args.seeds:
                for system in args.systems:
                    if system == "ours":
                        r = run_ours(lv, seed, n, args)
                    else:
                        key = (system, lv, seed)
                        if key not in per_seed:
                            per_seed[key] = run_gepa(lv, seed, args) if system == "gepa" else run_oracle(lv, seed, args)
                        r = per_seed[key]
                    runs[system].append(r)
                    if args.verbose:
                        print(verbose_row(system, n if system == "ours" else None, seed, r), flush=True)
            print(f"{'system':<7} {'calls':>18} {'learnt/8':>10} {'harmful kept':>14} {'vague':>6} {'restated':>9} {'dups':>6}"
                  f" {'true h-o':>8} {'measured':>11} {'seconds':>7}")
            for system in args.systems:
                print(summary_row(system, runs[system]))
            calls = {s: med([r["calls"] for r in rs if "calls" in r]) for s, rs in runs.items() if any("calls" in r for r in rs)}
            ratios = [f"ours/{peer} {calls['ours'] / calls[peer]:.2f}" for peer in ("oracle", "gepa")
                      if "ours" in calls and peer in calls and calls[peer]]
            if ratios:
                print("median calls: " + ", ".join(ratios))
            found = [r["found_at"] for r in runs.get("gepa", []) if r.get("found_at") is not None]
            if found:
                print(f"gepa spends its whole budget; its best candidate was found at {spread(found)} calls"
                      " (the calls spent when its valset evaluation began)")


if __name__ == "__main__":
    main()
