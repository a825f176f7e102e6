"""The verbs over the run service (`agentdescent.runs`): `plan` a run and read its quote, `evolve`
(start it, detached), `status`, `watch` and `show` it, write its HTML `report`, `accept` or
`reject` its change, `cancel` and `resume` it, list the `runs` (`--prune`: `agentdescent.cli.prune`).

Each verb is one service call and a few lines saying what happened, then `next:` what to do;
`--json` prints the service's record as it is, for scripts. A verb given no RUN takes the latest
run and says which. Left out: following a run live (`agentdescent.cli.watch`), the machine's verbs
(`doctor`, `mcp`: `agentdescent.cli.hosts`) and the demo.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rich.console import Console

from agentdescent.cli import plain
from agentdescent.cli.prune import prune
from agentdescent.cli.terminal import coloured, console_for
from agentdescent.cli.views import plural
from agentdescent.cli.watch import ending, say, watched
from agentdescent.commands import command
from agentdescent.dataloader.local import TASK_FILES
from agentdescent.engine import TEMPORARY_LEDGER_PREFIX
from agentdescent.errors import UserError
from agentdescent.runs import Service, keys
from agentdescent.runs.agentcheck import CHECK_MODELS_HELP
from agentdescent.runs.quote import money
from agentdescent.runs.review import DiffView, Shown
from agentdescent.runs.spec import SpecError
from agentdescent.runs.status import RunStatus, said_tokens
from agentdescent.runs.unseen import Unseen
from agentdescent.usage import money_spent

Command = Callable[[argparse.Namespace, Console], int]
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
SHOWN_REJECTED = 5
CLIP = 100  # characters of a prompt or an output in a line of `show`
T = TypeVar("T")


def add_verbs(commands: argparse._SubParsersAction) -> None:
    """The verbs' parsers, each with an example in its --help."""
    plan = verb(commands, "plan", "what a run of SPEC would do and cost; nothing starts, but the spec's scorer is tried "
                                  "once and its python: code imported (plan only specs you trust)",
                "agentdescent plan examples/specs/support-router.yaml --check-models", spec=True, as_json=True)
    plan.add_argument("--check-models", action="store_true", help=CHECK_MODELS_HELP)
    evolve = verb(commands, "evolve", "start a run of SPEC in its own process, which goes on when this shell ends",
                  "agentdescent evolve examples/specs/support-router.yaml --watch", spec=True)
    evolve.add_argument("--allow-concurrent", action="store_true",
                        help="start it although another run is evolving the same target")
    verb(commands, "status", "where a run is: state, round, rewards, calls, outcomes and what to do next",
         "agentdescent status my-skill-3f2a1c", run=True, as_json=True)
    verb(commands, "watch", "follow a run's progress bar from any shell until it ends (Ctrl-C stops watching, "
         "not the run); exits 0 when the run finished", "agentdescent watch", run=True)
    show = verb(commands, "show", "a run's change as a diff, with its rewards, the diffs it committed and their "
                "evidence, the ones it rejected and its worst rollouts", "agentdescent show --all", run=True, as_json=True)
    show.add_argument("--all", action="store_true", help=f"list every rejected diff, not the first {SHOWN_REJECTED}")
    report = verb(commands, "report", "write one HTML page of a run (its rewards plotted, every diff's outcome, every "
                  "commit, the final change) and print its path", "agentdescent report my-skill-3f2a1c --out run.html")
    report.add_argument("run", metavar="RUN", nargs="?", help="a run id (or its first letters), or a ledger folder (what "
                        "evolve(store=...) or agentdescent demo wrote); default: the latest run")
    report.add_argument("--out", metavar="PATH", help="the file to write, its missing folders made (default: report.html "
                        "in the run's folder, or agentdescent/report.html in the ledger folder); an earlier report there "
                        "is replaced, any other file only with --force")
    report.add_argument("--force", action="store_true", help="write over a file at --out that is not an earlier report "
                        "(never over the run's target, its tasks file, its spec file (the one it was started from and the one "
                        "init writes beside its target), its folder or its ledger)")
    accept = verb(commands, "accept", "write a finished run's change back to its target (backing it up first), "
                  "or approve a running run's pending L1 change", "agentdescent accept --dry-run", run=True)
    accept.add_argument("--dry-run", action="store_true", help="say what would be written, write nothing")
    accept.add_argument("--overwrite", action="store_true",
                        help="write the run's version over files you edited since the run started that cannot be merged")
    reject = verb(commands, "reject", "drop a run's change (nothing is written), or decline its pending L1 change",
                  "agentdescent reject my-skill-3f2a1c", run=True)
    for parser in (accept, reject):
        parser.add_argument("--change", metavar="ID", help="the pending L1 change to answer, by the id show gives "
                            "(needed while a run waits for an approval: a change posted since is never answered)")
    verb(commands, "cancel", "stop a running run; what it committed stays, and resume continues it",
         "agentdescent cancel", run=True)
    verb(commands, "resume", "start a cancelled, interrupted or failed run again where it stopped",
         "agentdescent resume --watch", run=True)
    runs = verb(commands, "runs", "list the runs in the run store ($AGENTDESCENT_HOME/runs)", "agentdescent runs",
                as_json=True)
    runs.add_argument("--prune", action="store_true",
                      help=f"instead, remove from {tempfile.gettempdir()} what is yours and left behind: the "
                           f"{TEMPORARY_LEDGER_PREFIX}* ledgers of runs without a store and killed commands' scratch, "
                           "10 minutes old; stopped runs' rollout folders, at once (no process holds them); other "
                           "users' folders and the run store are never touched")
    for name in ("evolve", "resume"):
        commands.choices[name].add_argument("--watch", action="store_true",
                                            help="follow it here until it ends, as watch does")
        commands.choices[name].add_argument("--json", action="store_true", help="print the started run's record "
                                            "as JSON (its run_id, state, folder, message and next); not with --watch")


def verb(commands: argparse._SubParsersAction, name: str, summary: str, example: str, *, spec: bool = False,
         run: bool = False, as_json: bool = False) -> argparse.ArgumentParser:
    """A verb's parser: its summary, its example in --help, and the SPEC, RUN or --json it takes."""
    parser = commands.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                                 epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)
    if spec:
        parser.add_argument("spec", metavar="SPEC", help="the run spec, a .yaml, .yml or .json file")
    if run:
        parser.add_argument("run", metavar="RUN", nargs="?", help="a run id, or its first letters (default: the latest run)")
    if as_json:
        parser.add_argument("--json", action="store_true", help="print the record as JSON")
    return parser


def _read_spec(args: argparse.Namespace, console: Console, use: Callable[[str], T]) -> T:
    """`use(the spec file)`; with --json, a spec's problems go to stdout too, by field, for the
    script that reads it (the `SpecError` still ends the command)."""
    try:
        return use(_spec_file(args.spec))
    except SpecError as exc:
        if args.json:
            plain.problems(console, exc)
        raise


def run_plan(args: argparse.Namespace, console: Console) -> int:
    plan = _read_spec(args, console, lambda spec: Service().plan(spec, check_models=args.check_models))
    if args.json:
        return plain.model(console, plan)
    q = plan.quote
    files = f", {plural(plan.files, 'file')}" if plan.files is not None else ""
    caps = ([f"at {q.calls_cap} by max_calls"] if q.calls_cap is not None else []) + (
        [f"at about {q.calls_by_tokens} by max_tokens"] if q.calls_by_tokens is not None else [])
    cap = "capped " + " and ".join(caps) if caps else "no cap (max_calls or max_tokens sets one)"
    cost = money(q) or "no price in the spec (price_per_call or price_per_1k_tokens gives one)"
    shown = ", ".join(plan.carried[:3]) + (f" and {plan.carried_total - 3} more" if plan.carried_total > 3 else "")
    carried = [f"  carried as they are (not text, never changed): {shown}"] if plan.carried else []
    say(console, f"plan for {plan.target} ({plan.kind}{files}); nothing has started", *carried,
        f"  tasks: {plan.tasks} ({plan.train} train, {plan.held_out} held out)",
        f"  agent: {plan.agent}", f"  reflector: {plan.reflector}",
        f"  {plural(plan.n_workers, 'worker')}, at most {plural(plan.rounds, 'round')}",
        f"  calls: {q.calls_low}-{q.calls_high}, {cap}; about {q.tokens_per_call} tokens a call",
        f"  cost: {cost}", f"  basis: {q.basis}", *(f"  model: {line}" for line in plan.models),
        *(f"warning: {w}" for w in plan.warnings),
        f"next: if that suits, {command('evolve', args.spec)} starts it")
    return 0


def run_evolve(args: argparse.Namespace, console: Console) -> int:
    _one_way_out(args)
    service = Service()
    started = _read_spec(args, console, lambda spec: service.start(spec, allow_concurrent=args.allow_concurrent))
    if args.json:
        return plain.model(console, started)
    say(console, f"started run {started.run_id} in its own process: closing this shell does not stop it",
        f"  its folder: {started.folder}", *(f"warning: {w}" for w in started.warnings))
    return _after_start(service, started.run_id, args.watch, console)


def run_resume(args: argparse.Namespace, console: Console) -> int:
    _one_way_out(args)
    service = Service()
    started = service.resume(_pick(service, args.run, console, quiet=args.json))
    if args.json:
        return plain.model(console, started)
    say(console, f"resumed run {started.run_id} in its own process, from its last checkpoint",
        *(f"warning: {w}" for w in started.warnings))
    return _after_start(service, started.run_id, args.watch, console)


def _one_way_out(args: argparse.Namespace) -> None:
    if args.json and args.watch:
        raise UserError("--json and --watch both print to stdout: give one (with --json, follow the run after with "
                        "agentdescent watch RUN_ID)")


def _after_start(service: Service, run_id: str, watch: bool, console: Console) -> int:
    if watch:
        return watched(service, run_id, console)
    say(console, f"next: {command('watch', run_id)} follows it; {command('status', run_id)} for a glance; "
                 f"{command('cancel', run_id)} stops it")
    return 0


def run_watch(args: argparse.Namespace, console: Console) -> int:
    service = Service()
    return watched(service, _pick(service, args.run, console), console)


def run_status(args: argparse.Namespace, console: Console) -> int:
    service = Service()
    status = service.status(_pick(service, args.run, console, quiet=args.json))
    if args.json:
        return plain.model(console, status)
    cap = f" of at most {status.max_calls}" if status.max_calls else ""
    outcomes = ", ".join(f"{kind} {n}" for kind, n in sorted(status.outcomes.items(), key=lambda kv: -kv[1]))
    last = f" (last measured {status.last_held_out:.3f})" if status.last_held_out is not None else ""
    ending(console, status, f"  target: {status.target} ({status.kind})",
           f"  round {status.round} of {status.rounds}; held-out reward "
           f"{_rewards(status.initial_reward, status.best_reward)}{last}",
           f"  calls: {status.calls}{cap}, {said_tokens(status.tokens, status.estimated_tokens)}{_money(status)}", *_failures(status),
           f"  diffs: {outcomes or 'none judged yet'}",
           *(f"  warning: {w}" for w in status.warnings),
           *([f"  waiting on {status.waiting_on}"] if status.waiting_on else []))
    return 0


def _money(status: RunStatus) -> str:
    spent = money_spent(status.cost_usd, status.unpriced)
    return f", {spent}" if spent else ""


def _failures(status: RunStatus) -> list[str]:
    """The calls that failed, each a rollout scored 0: unseen, they read as a skill that does badly."""
    if not status.failures:
        return []
    first = f"; the first: {status.failure}" if status.failure else ""
    return [f"  failed calls: {status.failures} of {status.calls}, each scored 0{first}"]


def run_show(args: argparse.Namespace, console: Console) -> int:
    service = Service()
    shown = service.show(_pick(service, args.run, console, quiet=True), rejected=None if args.all else SHOWN_REJECTED)
    if args.json:
        return plain.model(console, shown)
    say(console, f"run {shown.run_id} ({shown.state}): {shown.target}",
        f"held-out reward: {_rewards(shown.initial_reward, shown.final_reward)}"
        + (f" (version {shown.version})" if shown.version is not None else ""))
    if shown.diff:
        say(console, f"the change ({plural(len(shown.files_changed), 'file')}: {', '.join(shown.files_changed)}):")
        if console.is_terminal:
            console.print(coloured(shown.diff), soft_wrap=True)
        else:  # to a file or a pipe as it is, tabs and carriage returns too, so that `git apply` or `patch` takes it
            plain.write(console, shown.diff)
        _unseen(console, shown.unseen)
    elif not shown.unmeasured:
        say(console, "no change: the best version is the target as it was")
    if shown.unmeasured:
        say(console, f"{'no measured change: ' if not shown.diff else 'note: '}{shown.unmeasured}")
    _diff_list(console, f"committed diffs ({len(shown.committed)})", shown.committed)
    rejected = shown.rejected
    hint = f"; the first {len(rejected)} listed, --all lists every one" if len(rejected) < shown.rejected_total else ""
    _diff_list(console, f"rejected diffs ({shown.rejected_total}{hint})", rejected)
    _worst(console, shown)
    if shown.markers_left:
        say(console, f"{keys.said(shown.markers_left)}:", *(f"  {where}" for where in shown.markers_left))
    say(console, f"report: {shown.report}")
    if shown.pending_approval:
        p = shown.pending_approval
        say(console, f"L1 change {p.change} waits for your approval ({', '.join(p.keys)}): {p.verdict}", f"  {p.rationale}")
        console.print(coloured(p.diff), soft_wrap=True)
        _unseen(console, p.unseen)
    say(console, f"next: {shown.next}")
    return 0


def run_report(args: argparse.Namespace, console: Console) -> int:
    from agentdescent.report import write_report  # here: it reads the outcomes' meanings from agentdescent.cli

    service = Service()
    path = write_report(args.run or _pick(service, None, console), out=args.out, store=service.store, force=args.force)
    say(console, f"wrote the report: {path}", "next: open it in a browser; it is one file and needs no network")
    return 0


def _diff_list(console: Console, title: str, diffs: list[DiffView]) -> None:
    """Each diff: its round, id, author and outcome, then what it changes (its files, or a rule's
    text), the reason for its outcome, and the evidence it came with (each task and its reward). A diff with
    no change to show (one refused before it could be read) leads with its reason."""
    say(console, title + (":" if diffs else ""))
    for d in diffs:
        what = ", ".join(d.keys) if d.keys else "; ".join(d.edits)
        removes = f"; removes {', '.join(d.removes)}" if d.removes else ""
        evidence = ", ".join(f"task {t} reward {r:.2f}" for t, r in zip(d.evidence_tasks, d.evidence_rewards))
        say(console, f"  round {d.round + 1}  {d.diff_id} by {d.author or '-'} ({d.outcome}): {what or d.reason}{removes}",
            *([f"      {d.reason}"] if what else []),
            *([f"      evidence (the rollouts it came from): {evidence}"] if evidence else []))


def _unseen(console: Console, found: list[Unseen]) -> None:
    """The diff's lines that hold characters a reader does not see or takes for others, escaped: to a file or a
    pipe it is printed as it is."""
    if found:
        say(console, f"characters a reader does not see or takes for others, in {plural(len(found), 'line')} of it, here as escapes:",
            *(f"  line {u.line}: {u.text}" for u in found))


def _worst(console: Console, shown: Shown) -> None:
    if not shown.worst_rollouts:
        return
    say(console, f"the rollouts of version {shown.version} that scored below 1, lowest first:")
    for r in shown.worst_rollouts:
        say(console, f"  {r.task_id} ({'held out' if r.held_out else 'train'}) reward {r.reward:.2f}: "
                     f"{_clip(r.prompt)} -> {_clip(r.output)}")


def run_accept(args: argparse.Namespace, console: Console) -> int:
    service = Service()
    done = service.accept(_pick(service, args.run, console), dry_run=args.dry_run, overwrite=args.overwrite,
                          change=args.change)
    say(console, done.message)
    if done.approved is not None:
        say(console, f"next: {command('watch', done.run_id)} follows the run")
        return 0
    verb = "would write" if done.dry_run else "written"
    merged = set(done.merged)
    say(console, *(f"  {verb}: {path}" + (" (merged with what changed on disk)" if path in merged else "")
                   for path in done.written),
        *(f"  {'would delete' if done.dry_run else 'deleted'}: {path}" for path in done.deleted),
        *(f"  kept as it changed on disk since the run started: {path}" for path in done.kept),
        *(f"  changed on disk and by the run, cannot merge: {path}" + (" (the run's version written over it)" if
          args.overwrite and not done.dry_run else "") for path in done.conflicts),
        *(f"  beside it: {why}" for why in done.refused),
        *(f"  marker left as it is (not where the target held the key): {where}" for where in done.markers_left))
    if done.backup:
        say(console, f"  backup: {done.backup}")
    if done.next:
        say(console, f"next: {done.next}")
    return 0


def run_reject(args: argparse.Namespace, console: Console) -> int:
    service = Service()
    done = service.reject(_pick(service, args.run, console), change=args.change)
    after = f"{command('watch', done.run_id)} follows the run" if done.approved is not None else done.next
    say(console, done.message, f"next: {after}")
    return 0


def run_cancel(args: argparse.Namespace, console: Console) -> int:
    service = Service()
    ending(console, service.cancel(_pick(service, args.run, console)))
    return 0


def run_runs(args: argparse.Namespace, console: Console) -> int:
    if args.prune:
        return prune(console)
    service = Service()
    runs = service.runs()
    if args.json:
        return plain.record(console, [r.model_dump(mode="json") for r in runs])
    if not runs:
        say(console, f"no runs in {service.store.root} yet", "next: agentdescent evolve SPEC starts one")
        return 0
    rows = [("id", "state", "target", "round", "held-out reward", "message")] + [
        (r.id, r.state, r.target, f"{r.round}/{r.rounds}", _rewards(r.initial_reward, r.best_reward), r.message)
        for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    say(console, *("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]) for row in rows))
    say(console, f"{plural(len(runs), 'run')} in {service.store.root}",
        "next: agentdescent status RUN, agentdescent show RUN (RUN: an id, or its first letters)")
    return 0


def _pick(service: Service, run: str | None, console: Console, *, quiet: bool = False) -> str:
    """RUN as given, or the latest run (said on stdout, or on stderr when stdout is JSON). An empty
    RUN is refused, not taken for the latest: `accept "$RUN"` with RUN unset must not accept another."""
    if run is not None:
        if not run.strip():
            raise UserError("RUN is empty (a shell variable that is not set?); give a run id, or leave RUN out "
                            "for the latest run")
        return run
    runs = service.store.all()  # in order, read without a status
    if not runs:
        raise UserError(f"there are no runs in {service.store.root} yet; start one with: agentdescent evolve SPEC")
    say(console_for(sys.stderr) if quiet else console, f"run {runs[-1].id} (the latest; give RUN for another)")
    return runs[-1].id


def _spec_file(spec: str) -> str:
    """SPEC, checked for its kind: a folder or another file is what `init` writes a spec for."""
    if Path(spec).suffix.lower() in set(TASK_FILES) - set(SPEC_SUFFIXES):
        raise UserError(f"{spec} looks like a tasks file, not a run spec; write a spec for what it evolves first: "
                        f"{command('init', 'FOLDER_OR_FILE', spec)}")
    if Path(spec).suffix.lower() not in SPEC_SUFFIXES:
        raise UserError(f"{spec} is not a run spec (a .yaml, .yml or .json file); write a spec first: "
                        f"{command('init', spec)} [TASKS]")
    return spec


def _rewards(before: float | None, after: float | None) -> str:
    """_rewards(0.32, 1.0) == "0.320 -> 1.000"; _rewards(None, None) == "not measured yet"."""
    if before is None and after is None:
        return "not measured yet"
    return " -> ".join("-" if r is None else f"{r:.3f}" for r in (before, after))


def _clip(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= CLIP else line[:CLIP] + " …"


VERBS: dict[str, Command] = {
    "plan": run_plan, "evolve": run_evolve, "status": run_status, "watch": run_watch, "show": run_show, "report": run_report,
    "accept": run_accept, "reject": run_reject, "cancel": run_cancel, "resume": run_resume, "runs": run_runs,
}
