"""The `agentdescent` command. `agentdescent demo` runs a whole evolution offline, with no key;
`agentdescent restore PATH` puts the last backup a write-back took of PATH back.

Every verb runs through `guarded`: an error this package raises on purpose is one `error:` line
(its message says how to fix it) and exit code 2 for a usage error, 1 for another failure; the
traceback only with `agentdescent --debug VERB`."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from agentdescent.agents.redact import RedactingStream
from agentdescent.artifacts import backups
from agentdescent.artifacts.writeback import restore
from agentdescent.cli import flags
from agentdescent.cli.demo import run_reference
from agentdescent.cli.hosts import HOST_VERBS, add_host_verbs
from agentdescent.cli.report import Timing, process_seconds, report
from agentdescent.cli.verbs import VERBS, add_verbs
from agentdescent.cli.views import ProgressView, plural
from agentdescent.errors import AgentDescentError, UserError
from agentdescent.testing import STRATEGIES, demo_strategy

Command = Callable[[argparse.Namespace, Console], int]
USAGE, FAILURE, INTERRUPTED = 2, 1, 130
LOADED = time.perf_counter()  # where the process's age cannot be read, the command's time counts from here


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return USAGE
    verbs: dict[str, Command] = {"demo": run_demo, "restore": run_restore, **VERBS, **HOST_VERBS}
    return guarded(verbs[args.command], args, Console(file=RedactingStream(sys.stdout)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentdescent", description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="evolve a keyword-router skill offline, no key needed",
        description="Evolve a keyword-router skill offline, no key needed; example: agentdescent demo --workers 4")
    demo.add_argument("--workers", type=int, default=8, help="parallel workers (default 8)")
    demo.add_argument("--strategy", choices=STRATEGIES, default="append", help="how rules are held (default append)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the data, the split and the reflector")
    demo.add_argument("--rounds", type=int, default=30, help="most aggregator steps to run (default 30)")
    demo.add_argument("--store", help="ledger folder, continued if it holds one (default: a new temporary folder)")
    demo.add_argument("--all-diffs", action="store_true", help="list every diff, not a few of each outcome")
    back = commands.add_parser(
        "restore", help="put the last backup a write-back took of PATH back (backing PATH up first)",
        description="Put back the newest backup result.write_to(PATH) took (PATH.bak-N beside it). What PATH "
                    "holds now is backed up first, so a restore can be undone; example: agentdescent restore skill/")
    back.add_argument("path", metavar="PATH", help="the file or folder result.write_to wrote")
    add_verbs(commands)
    add_host_verbs(commands)
    return parser


def guarded(command: Command, args: argparse.Namespace, console: Console) -> int:
    """Run one verb and return its exit code. A `UserError` (the input is wrong) exits 2 and any
    other `AgentDescentError` 1, each printed as `error: <message>` on stderr; the traceback is
    printed too with `--debug`. Anything else is a bug and keeps its traceback."""
    try:
        return command(args, console)
    except AgentDescentError as exc:
        if getattr(args, "debug", False):
            traceback.print_exc(file=RedactingStream(sys.stderr))
        Console(file=RedactingStream(sys.stderr)).print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True,
                                                        highlight=False)
        return USAGE if isinstance(exc, UserError) else FAILURE
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted", highlight=False)
        return INTERRUPTED


def run_restore(args: argparse.Namespace, console: Console) -> int:
    done = restore(args.path)
    target = Path(args.path).absolute()
    if not done.changed:
        said = f"{target} already matches its latest backup {done.source}; nothing changed"
    else:
        before = f"what it held before is in {done.backup}" if done.backup else "it was not there before"
        said = f"restored {target} from {done.source} ({len(done.changed)} paths put back); {before}"
    where = target.parent / f"{backups.base_name(target)}.bak-*"
    passed_over = "".join(f"\nnot used: {why}" for why in done.refused)
    console.print(escape(f"{said}{passed_over}\nbackups: {where}"), soft_wrap=True, highlight=False)
    return 0


def run_demo(args: argparse.Namespace, console: Console) -> int:
    workers = flags.positive("--workers", args.workers, 4)
    rounds = flags.positive("--rounds", args.rounds, 30)
    store = flags.store_folder("--store", args.store)
    console.print("[bold]AgentDescent demo[/bold]: evolving a keyword-router skill offline", highlight=False)
    console.print(f"{plural(workers, 'worker')}, at most {plural(rounds, 'round')}, strategy {args.strategy}, "
                  f"seed {args.seed}", highlight=False)
    started = time.perf_counter()
    view = ProgressView(console)
    with view:
        result = run_reference(n_workers=workers, strategy=args.strategy, seed=args.seed, rounds=rounds,
                               store=store, on_event=view.on_event)
    timing = Timing(evolution=time.perf_counter() - started, command=process_seconds(LOADED))
    report(console, result, demo_strategy(args.strategy), view.seen, timing, limit=None if args.all_diffs else 3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
