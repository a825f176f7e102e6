"""The `agentdescent` command. `agentdescent demo` runs a whole evolution offline, with no key."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from rich.console import Console

from agentdescent.cli.demo import STRATEGIES, demo_strategy, run_reference
from agentdescent.cli.views import ProgressView, report
from agentdescent.errors import AgentDescentError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentdescent", description=__doc__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="evolve a keyword-router skill offline, no key needed")
    demo.add_argument("--workers", type=int, default=8, help="parallel workers (default 8)")
    demo.add_argument("--strategy", choices=STRATEGIES, default="append", help="how rules are held (default append)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the data, the split and the reflector")
    demo.add_argument("--rounds", type=int, default=30, help="most aggregator steps to run (default 30)")
    demo.add_argument("--store", help="ledger folder (default: a new temporary folder)")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    console = Console()
    try:
        return run_demo(args, console)
    except AgentDescentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1


def run_demo(args: argparse.Namespace, console: Console) -> int:
    console.print(
        f"[bold]AgentDescent demo[/bold]: a keyword-router skill, {args.workers} workers, "
        f"strategy {args.strategy}, seed {args.seed}"
    )
    started = time.perf_counter()
    with ProgressView(console) as view:
        result = run_reference(
            n_workers=args.workers, strategy=args.strategy, seed=args.seed, rounds=args.rounds,
            store=args.store, on_event=view.on_event,
        )
    elapsed = time.perf_counter() - started
    report(console, result, elapsed, demo_strategy(args.strategy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
