"""The `agentdescent` command. `agentdescent demo` runs a whole evolution offline, with no key;
`agentdescent restore PATH` undoes the last write-back (or restore) of PATH from its backup.

Every verb runs through `guarded` (`agentdescent.cli.guard`): an error this package raises on
purpose is one `error:` line (its message says how to fix it) and exit code 2 for a usage error, 1
for another failure; the traceback only with `agentdescent --debug VERB`."""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from agentdescent.artifacts.pruning import KEEP
from agentdescent.cli import flags
from agentdescent.cli.demo import run_reference
from agentdescent.cli.guard import USAGE, Command, guarded
from agentdescent.cli.hosts import HOST_VERBS, add_host_verbs
from agentdescent.cli.init import INIT_VERBS, add_init_verb
from agentdescent.cli.report import Timing, process_seconds, report
from agentdescent.cli.terminal import console_for
from agentdescent.cli.verbs import VERBS, add_verbs
from agentdescent.cli.views import ProgressView, plural
from agentdescent.cli.watch import say
from agentdescent.errors import UserError
from agentdescent.runs import Service
from agentdescent.runs.doctor import package_version
from agentdescent.runs.restoring import listing
from agentdescent.testing import STRATEGIES, demo_strategy

LOADED = time.perf_counter()  # where the process's age cannot be read, the command's time counts from here


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return USAGE
    verbs: dict[str, Command] = {"demo": run_demo, "restore": run_restore, **VERBS, **HOST_VERBS, **INIT_VERBS}
    for stream in (sys.stdout, sys.stderr):  # a terminal that is not UTF-8 gets "\xb1" for "±", not a traceback
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    return guarded(verbs[args.command], args, console_for(sys.stdout))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentdescent", description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.add_argument("--version", action="version", version=f"agentdescent {package_version()}")
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
        "restore", help="undo the last write-back (accept, result.write_to) or restore of PATH from its backup",
        description="Put back the newest backup of PATH (.NAME.bak-N beside it): what PATH held before the last "
                    "write-back or restore. What PATH holds now is backed up first, so running restore again undoes "
                    f"the restore; --backup N puts an older backup back (the newest {KEEP} are kept). Edits made "
                    "since the last write-back or restore refuse it (--overwrite puts it back over them, backed up "
                    "first). The run whose write-back this undoes says restored in its status.",
        epilog="examples:\n  agentdescent restore skill/              # undo the accept\n"
               "  agentdescent restore skill/              # again: the accepted version is back\n"
               "  agentdescent restore skill/ --backup 1   # backup number 1, whatever came after",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    back.add_argument("path", metavar="PATH", help="the file or folder accept or result.write_to wrote")
    back.add_argument("--backup", metavar="N", type=int, help="the number of the backup to put back "
                      "(.NAME.bak-N; default: the newest)")
    back.add_argument("--overwrite", action="store_true", help="restore even over edits made since the last "
                      "write-back or restore (the backup taken first keeps them); without it they refuse the restore")
    add_init_verb(commands)
    add_verbs(commands)
    add_host_verbs(commands)
    return parser


def run_restore(args: argparse.Namespace, console: Console) -> int:
    if not args.path.strip():  # `restore "$TARGET"` with TARGET unset must not restore the current folder
        raise UserError("PATH is empty (a shell variable that is not set?); give the file or folder to restore, "
                        "or . for the current folder")
    done = Service().restore(args.path, args.backup, overwrite=args.overwrite)
    target = Path(done.target)
    say(console, done.message, *(f"not used: {why}" for why in done.refused), listing(target, done.numbers),
        *([f"next: {done.next}"] if done.next else []))
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
