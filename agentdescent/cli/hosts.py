"""The verbs of this machine and the hosts on it. `agentdescent doctor` says what the machine has
(git, the agent CLIs, keys, the hosts, the run store); `agentdescent mcp` serves the run verbs to a
host as MCP tools; `agentdescent install HOST` and `agentdescent uninstall HOST` wire AgentDescent's
MCP server and skill into Claude Code (the plugin, through its marketplace), Codex (a block in
config.toml and the skill) or DeepSeek Harness (a row in cordis.patch.yml and the skill); and take
out exactly that. The work is the host modules' (`agentdescent.hosts`) and the service's; this
says what happened and what next.

`install` refuses, wiring nothing, when the host's CLI is not on PATH (wiring a host that is not
there is more often a typo or a missing step than a plan), and says how to install it;
`--without-cli` wires Codex or DeepSeek Harness anyway, for a CLI installed later. Claude Code is
wired through its own CLI, so it always needs it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable

from rich.console import Console

from agentdescent.cli import plain, verbs
from agentdescent.cli.terminal import console_for
from agentdescent.cli.watch import FAILURE, say
from agentdescent.errors import UserError
from agentdescent.hosts import HOSTS, module
from agentdescent.hosts.base import scripts_not_on_path
from agentdescent.runs import Service

Command = Callable[[argparse.Namespace, Console], int]


def add_host_verbs(commands: argparse._SubParsersAction) -> None:
    verbs.verb(commands, "doctor", "what this machine has: git, the agent CLIs, provider keys, the hosts and the run "
               "store; exits 0 when the demo can run", "agentdescent doctor", as_json=True)
    verbs.verb(commands, "mcp", "serve the run verbs as MCP tools on stdio (what a host such as Claude Code starts)",
               "claude mcp add agentdescent -- agentdescent mcp")
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


def run_doctor(args: argparse.Namespace, console: Console) -> int:
    report = Service().doctor()
    if args.json:
        plain.model(console, report)
        return 0 if report.demo_ok else FAILURE

    def program(p) -> str:
        if p.problem:
            return f"{p.name}: {p.problem}"
        return f"{p.name}: found, {p.version or 'version unknown'} ({p.path})" if p.found else f"{p.name}: not found"

    say(console, f"agentdescent {report.agentdescent} on Python {report.python}", program(report.git),
        "agent CLIs:", *(f"  {program(a)}" for a in report.agents),
        f"provider keys set: {', '.join(report.keys_set) or 'none'}; missing: {', '.join(report.keys_missing) or 'none'}",
        *([f"endpoints set: {', '.join(report.endpoints_set)}"] if report.endpoints_set else []), "hosts:",
        *(f"  {h.host}: {f'installed ({h.version})' if h.installed and h.version else 'installed' if h.installed else 'not installed'}, "
          + ("wired" if h.wired else f"not wired; to wire it: {h.how}") for h in report.hosts),
        f"run store: {report.store} ({'writable' if report.store_writable else 'NOT writable'}"
        f"{'' if report.store_exists else '; not there yet: the first run makes it'})",
        *(f"problem: {p}" for p in report.problems), f"next: {report.next}")
    return 0 if report.demo_ok else FAILURE


def run_mcp(args: argparse.Namespace, console: Console) -> int:
    try:
        from agentdescent_mcp.server import main as serve
        from agentdescent_mcp.wire import closed_stdio
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("agentdescent_mcp"):
            raise
        raise UserError("the MCP server's package (agentdescent_mcp) is not installed here; reinstall AgentDescent "
                        "from its repository (pip install -e .), which installs it too") from None
    closed = closed_stdio()
    if closed:
        raise UserError(closed)
    serve()  # stdout is the protocol: what this says goes to stderr
    console_for(sys.stderr).print("the MCP server stopped: its client closed the connection", highlight=False)
    return 0


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


HOST_VERBS: dict[str, Command] = {"doctor": run_doctor, "mcp": run_mcp, "install": run_install, "uninstall": run_uninstall}
