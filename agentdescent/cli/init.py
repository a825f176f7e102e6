"""`agentdescent init TARGET [TASKS]`: write a first run spec beside TARGET, so that a shell user
starts from a folder and a tasks file with no spec to write. The drafting is `runs.draft`'s;
this says what it wrote, what it chose and the next command. Left out: checking the spec (plan).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rich.console import Console

from agentdescent.cli.watch import say
from agentdescent.dataloader.local import TASK_FILE_SUFFIXES
from agentdescent.runs.draft import SUFFIX, draft

Command = Callable[[argparse.Namespace, Console], int]
EXAMPLE = """examples:
  agentdescent init my-skill tasks.jsonl    # writes my-skill.agentdescent.yaml beside my-skill
  agentdescent plan my-skill.agentdescent.yaml"""


def add_init_verb(commands: argparse._SubParsersAction) -> None:
    summary = (f"write a first run spec for TARGET (TARGET{SUFFIX} beside it), its tasks' columns and the agent "
               "filled in from what this machine has; plan it next")
    parser = commands.add_parser("init", help=summary, description=summary[0].upper() + summary[1:] + ".",
                                 epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="TARGET", help="the folder (a skill, agents, a plugin) or text file to improve")
    parser.add_argument("tasks", metavar="TASKS", nargs="?",
                        help=f"a {TASK_FILE_SUFFIXES} file of tasks (default: the spec names one for you to write)")
    parser.add_argument("--force", action="store_true", help="write the spec again over an existing one")


def run_init(args: argparse.Namespace, console: Console) -> int:
    done = draft(args.target, args.tasks, force=args.force)
    if done.tasks is None:
        tasks = "tasks: none given; the spec names a file for you to write"
    else:
        chosen = [f"{role} from column {column!r}" for role, column in
                  (("prompt", done.prompt), ("gold", done.gold), ("id", done.id)) if column]
        tasks = f"tasks: {done.tasks} ({done.rows} rows): {', '.join(chosen) or 'no columns told apart'}; check them"
    say(console, f"wrote {done.path}: a run spec for {done.target}; read it and change what does not fit",
        f"  {tasks}", f"  agent and reflector: {done.agent} ({done.why})" if not done.reflector else
        f"  agent: {done.agent}, reflector: {done.reflector} ({done.why})", *(f"  {note}" for note in done.notes),
        *(f"warning: {w}" for w in done.warnings),
        f"next: {done.next}")
    return 0


INIT_VERBS: dict[str, Command] = {"init": run_init}
