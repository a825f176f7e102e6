"""`agentdescent install HOST` and `agentdescent uninstall HOST`: wire AgentDescent's MCP server and
skill into Claude Code (the plugin, through its marketplace), Codex (a block in config.toml and the
skill) or DeepSeek Harness (a row in cordis.patch.yml and the skill); and take out exactly that.
The work is the host modules' (`agentdescent.hosts`); this says what happened and what next.

`install` refuses, wiring nothing, when the host's CLI is not on PATH (wiring a host that is not
there is more often a typo or a missing step than a plan), and says how to install it;
`--without-cli` wires Codex or DeepSeek Harness anyway, for a CLI installed later. Claude Code is
wired through its own CLI, so it always needs it.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable

from rich.console import Console

from agentdescent.cli.watch import say
from agentdescent.errors import UserError
from agentdescent.hosts import HOSTS, module
from agentdescent.hosts.base import scripts_not_on_path

Command = Callable[[argparse.Namespace, Console], int]


def add_host_verbs(commands: argparse._SubParsersAction) -> None:
    for verb, summary, example in (
        ("install", "wire AgentDescent into a host: its MCP server, the skill, and for Claude Code the plugin",
         "agentdescent install claude-code"),
        ("uninstall", "take out of a host exactly what install put in (Codex's and DeepSeek's other settings stay byte "
         "for byte; Claude Code's own `claude plugin` commands rewrite its settings.json, your settings keeping their "
         "values but not the file's layout)",
         "agentdescent uninstall codex"),
    ):
        parser = commands.add_parser(verb, help=summary, description=summary[0].upper() + summary[1:] + ".",
                                     epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("host", choices=list(HOSTS), help="the host to wire" if verb == "install" else
                            "the host to take it out of")
        if verb == "install":
            parser.add_argument("--force", action="store_true", help="install again over an earlier install, or over "
                                "a skill file or marketplace of yours of the same name (yours is kept, and uninstall "
                                "puts it back)")
            parser.add_argument("--without-cli", action="store_true", help="wire it although the host's CLI is not "
                                "on PATH, for one installed later (codex, deepseek)")


def run_install(args: argparse.Namespace, console: Console) -> int:
    host = module(args.host)
    if shutil.which(host.PROGRAM) is None and not (args.without_cli and args.host != "claude-code"):
        report = host.report()
        later = args.host != "claude-code"  # Claude Code's plugin goes in through its CLI
        if report.wired:  # `how` says where, not what to do
            update = f"; to bring it up to date all the same: agentdescent install {args.host} --without-cli" if later else ""
            raise UserError(f"`{host.PROGRAM}` is not on PATH, so nothing was changed, and none needs to be: "
                            f"{report.how}{update}")
        anyway = (f"; or wire it now for a {host.PROGRAM} you install later: agentdescent install {args.host} "
                  "--without-cli" if later else "")
        raise UserError(f"`{host.PROGRAM}` is not on PATH, so nothing was wired. To fix: {report.how}{anyway}")
    code = _report(console, host.install(force=args.force))
    missing = scripts_not_on_path()
    if missing:
        say(console, f"warning: {missing}")
    return code


def run_uninstall(args: argparse.Namespace, console: Console) -> int:
    return _report(console, module(args.host).uninstall())


def _report(console: Console, changed) -> int:  # noqa: ANN001 - a hosts.Changed
    say(console, changed.message, *(f"  wrote or removed: {p}" for p in changed.paths),
        *(f"  ran: {c}" for c in changed.commands), *([f"next: {changed.next}"] if changed.next else []))
    return 0


HOST_VERBS: dict[str, Command] = {"install": run_install, "uninstall": run_uninstall}
