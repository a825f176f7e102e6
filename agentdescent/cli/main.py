"""The `agentdescent` command. `agentdescent demo` runs a whole evolution offline, with no key;
`agentdescent restore PATH` puts the last backup a write-back took of PATH back."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from agentdescent.artifacts import backups
from agentdescent.artifacts.writeback import restore
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
    back = commands.add_parser(
        "restore", help="put the last backup a write-back took of PATH back (backing PATH up first)",
        description="Put back the newest backup result.write_to(PATH) took (PATH.bak-N beside it). What PATH "
                    "holds now is backed up first, so a restore can be undone; example: agentdescent restore skill/")
    back.add_argument("path", metavar="PATH", help="the file or folder result.write_to wrote")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    console = Console()
    try:
        return run_restore(args, console) if args.command == "restore" else run_demo(args, console)
    except AgentDescentError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 1


def run_restore(args: argparse.Namespace, console: Console) -> int:
    done = restore(args.path)
    target = Path(args.path).absolute()
    if not done.changed:
        said = f"{target} already matches its latest backup {done.source}; nothing changed"
    else:
        before = f"what it held before is in {done.backup}" if done.backup else "it was not there before"
        said = f"restored {target} from {done.source} ({len(done.changed)} paths put back); {before}"
    where = target.parent / f"{backups.base_name(target)}.bak-*"
    console.print(escape(f"{said}\nbackups: {where}"), soft_wrap=True, highlight=False)
    return 0


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
