"""The service under the CLI and the MCP server: plan, start, follow, stop and resume runs, and
let the host do a run's work. (Reviewing a run's change, accepting and rejecting it: `review`.)

Every verb is a method of `Service` returning a pydantic record, and raising `UserError` with
what to do next when it cannot: an unknown run id lists the known ones, a spec error names the
field. Nothing here needs the caller to stay: a started run lives in its own process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shlex
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agentdescent.agents.providers import PROVIDERS
from agentdescent.artifacts import backups
from agentdescent.artifacts.writeback import target_path
from agentdescent.commands import command
from agentdescent.engine.calls.smallest import Sizes, refusal
from agentdescent.engine.split import split_tasks, too_few_to_train
from agentdescent.errors import UserError
from agentdescent.governance import Governance
from agentdescent.runs import build, checkpointed, detach, hostwork, keys, leftovers, ontarget, restoring, review, sealed, verdict
from agentdescent.runs.agentcheck import missing_keys, model_listings, unsaved_sessions
from agentdescent.runs.doctor import DoctorReport, doctor
from agentdescent.runs.draft import cheaper_than_host
from agentdescent.runs.mailbox import Claim, Mailbox
from agentdescent.runs.placement import layout_warnings
from agentdescent.runs.quote import Quote, budget_warnings, held_out_warnings, money, quote, size_warnings, whole_file_warnings
from agentdescent.runs.rootconfig import root_config_of_stored, root_config_warnings
from agentdescent.runs.spec import AgentSpec, Problem, RunSpec, SpecError, read_spec
from agentdescent.runs.status import LIVE, RunStatus
from agentdescent.runs.store import RUN_ENV, RunDir, RunStore
from agentdescent.runs.targetread import unmatched_editable, unsaved_text
from agentdescent.types import Task

ASK_CONCURRENT = "or ask for a second run on purpose (--allow-concurrent; evolve's allow_concurrent from a host)"
SHOWN_CARRIED = 20  # a plan's carried files named: a page, not a folder's listing
RESUME_LOCK = "resume.lock"  # a run's file, held while a resume checks the run and starts its process


class Plan(BaseModel):
    """What a run would do and cost; nothing has started."""

    target: str
    kind: str
    files: int | None  # folder targets: how many text files, which a change may touch
    carried: list[str] = Field(default_factory=list)  # folder targets: files that are not text, carried as they are (the first 20)
    carried_total: int = 0  # how many there are
    tasks: int
    train: int
    held_out: int
    agent: str
    reflector: str
    n_workers: int
    rounds: int
    quote: Quote
    warnings: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)  # with check_models: what each model's server said, or why it was not asked
    next: str


class Started(BaseModel):
    run_id: str
    state: str
    folder: str
    message: str
    next: str
    warnings: list[str] = Field(default_factory=list)  # what the user must know as it starts: what its rollouts run


class RunSummary(BaseModel):
    id: str
    state: str
    target: str
    round: int
    rounds: int
    initial_reward: float | None
    best_reward: float | None
    message: str


class Service:
    """The verbs, over one run store (default: `$AGENTDESCENT_HOME/runs`)."""

    def __init__(self, store: RunStore | None = None) -> None:
        self.store = store or RunStore()

    def plan(self, spec: str | Path | dict[str, Any], *, base: str | Path | None = None, check_models: bool = False) -> Plan:
        """What a run of `spec` would do and cost. `check_models` asks each HTTP model's server for
        its list of models too (no tokens spent): a key refused or a model not served is a `SpecError`."""
        checked = read_spec(spec, base=base)
        planned = _plan(checked, _materials(checked))
        if not check_models:
            return planned
        problems, warnings, said = model_listings(checked)
        if problems:
            raise SpecError(problems)
        return planned.model_copy(update={"warnings": planned.warnings + warnings, "models": said})

    def start(self, spec: str | Path | dict[str, Any], *, base: str | Path | None = None,
              allow_concurrent: bool = False) -> Started:
        """Check the spec, make the run's folder and start its process; returns at once. The run
        records the spec file it was started from (`origin`), which its report never replaces."""
        _refuse_nested()
        checked = read_spec(spec, base=base)
        parts = _materials(checked)
        _split(checked, parts.tasks)  # plan's budget check, before any run folder exists
        checked = checked.model_copy(update={"kind": parts.kind})
        content, tasks = keys.masked(parts.content, parts.tasks) if checked.keys_in_target == "mask" else (
            parts.content, parts.tasks)
        with self._target_lock(checked.target):
            if not allow_concurrent:
                self._refuse_second_run(checked.target, ASK_CONCURRENT)
            said = root_config_warnings(checked, parts)  # in its status too, for whoever looks in on it later
            status = RunStatus(state="starting", target=checked.target, kind=parts.kind, rounds=checked.rounds, warnings=said,
                               max_calls=checked.budget.max_calls, allow_concurrent=allow_concurrent, message="starting")
            run = self.store.create(checked, tasks, content, status, parts.assets, parts.executable)
            self._launch(run, None if isinstance(spec, dict) else spec)
        return self._started(run, "started", said)

    def status(self, run_id: str) -> RunStatus:
        run = self.store.get(run_id)
        status = _with_leftovers(run, run.status())
        return status.model_copy(update={"waiting_on": hostwork.waiting_on(run)}) if status.state in LIVE else status

    def cancel(self, run_id: str) -> RunStatus:
        """Stop the run and every process it started; what it committed stays, and it can resume.
        A run whose process is gone has the programs it left running stopped."""
        run = self.store.get(run_id)
        status = run.status()
        if status.state == "interrupted" and (left := leftovers.stop_left(run)):
            after = status.model_copy(update={
                "state": "cancelled", "message": f"cancelled at round {status.round}: its process was gone, and "
                                                 f"{left} program(s) it had started were still running (now stopped)"})
            run.write_status(after)
            return after
        if status.state not in LIVE:
            raise UserError(f"run {run.id} is not running (it is {status.state}); nothing to cancel")
        status = _with_own_pid(run, status)
        ended = detach.stop(run, status.pid, status.pid_start)
        after = run.status()
        if not ended or after.state in LIVE or after.state == "interrupted":  # it had to be killed
            after = after.model_copy(update={
                "state": "cancelled", "message": f"cancelled at round {after.round} (its process was killed)",
                "next": f"{command('resume', run.id)} continues it from its last checkpoint"})
            run.write_status(after)
        return after

    def resume(self, run_id: str) -> Started:
        """Start an interrupted, cancelled or failed run's process again; it continues where it stopped. A
        run started beside the target's other runs on purpose (`allow_concurrent`) resumes so too."""
        _refuse_nested()
        run = self.store.get(run_id)
        # one resume of a run at a time, so that a second is told it is this run, not another on its target
        with run.holding(RESUME_LOCK, f"run {run.id} is being resumed right now, by another command; "
                                      f"{command('watch', run.id)} follows it"):
            status = run.status()  # as a resume that held the lock just now left it
            if status.state in LIVE:
                raise UserError(f"run {run.id} is still running; follow it with: {command('watch', run.id)}")
            if status.state in ("finished", "accepted", "rejected", "restored"):
                why = "was rejected" if status.state == "rejected" else f"is {status.state}: it got to its end"
                raise UserError(f"run {run.id} {why}, so there is nothing to resume; "
                                f"{status.next or 'agentdescent evolve SPEC starts a new run'}")
            sealed.check(run)  # edited since, it would be another run on this one's ledger, its bill begun again
            said = root_config_of_stored(run)
            lost = checkpointed.lost(run, status)
            if lost:
                raise UserError(f"{lost}; it cannot be resumed: {checkpointed.instead(run)}")
            if not leftovers.release(run):  # its process is gone (its status says so), not its lock
                lock = shlex.quote(str(run.file("lock")))
                raise UserError(f"run {run.id}'s process has ended but its lock is still held, by a program it started "
                                f"that carries no mark (its environment cleared?): find it with fuser -v {lock}, stop it, "
                                f"then: {command('resume', run.id)}")
            with self._target_lock(status.target):
                if not status.allow_concurrent:
                    self._refuse_second_run(status.target, "then resume this one, which was started alone")
                Mailbox(run.file("mailbox")).clear()  # the old process's requests: an answer to one now would be lost
                run.write_status(status.model_copy(update={"state": "starting", "message": "resuming", "error": None,
                                                           "pid": None, "pid_start": None}))  # the new process writes its own
                self._launch(run)
        return self._started(run, "resumed", said)

    def show(self, run_id: str, *, rejected: int | None = review.SHOWN_REJECTED) -> review.Shown:
        """The run's change; `rejected` caps the rejected diffs listed (None: all)."""
        return review.show(self.store, run_id, rejected=rejected)

    def accept(self, run_id: str, *, dry_run: bool = False, overwrite: bool = False,
               change: str | None = None) -> verdict.Accepted:
        """Write a finished run back; while it runs, approve its pending L1 change `change` (the id show gave)."""
        return verdict.accept(self.store, run_id, dry_run=dry_run, overwrite=overwrite, change=change)

    def reject(self, run_id: str, *, change: str | None = None) -> verdict.Accepted:
        """Drop a run's change; while it runs, decline its pending L1 change `change`."""
        return verdict.reject(self.store, run_id, change=change)

    def restore(self, path: str | Path, number: int | None = None, *, overwrite: bool = False) -> restoring.Restoration:
        """Put a backup of `path` back (the newest, or backup `number`); the run it undoes or redoes says so."""
        return restoring.restore(self.store, path, number, overwrite=overwrite)

    def doctor(self) -> DoctorReport:
        return doctor()

    def runs(self) -> list[RunSummary]:
        """Every run in the store, oldest first."""
        return self.summaries(self.store.all())

    def summaries(self, runs: list[RunDir]) -> list[RunSummary]:
        """A summary of each of `runs`: a page of `store.all()`, whose order reads no status, reads
        its own runs' alone; each target's backups are surveyed once for them all (`ontarget.Readings`)."""
        found, readings = [], ontarget.Readings()
        for run in runs:
            try:
                s = _with_leftovers(run, run.status(readings))
            except UserError as exc:  # listed, so that a damaged run does not vanish without a word
                found.append(RunSummary(id=run.id, state="damaged", target="", round=0, rounds=0, initial_reward=None,
                                        best_reward=None, message=str(exc)))
                continue
            found.append(RunSummary(id=run.id, state=s.state, target=s.target, round=s.round, rounds=s.rounds,
                                    initial_reward=s.initial_reward, best_reward=s.best_reward, message=s.message))
        return found

    # the host as a worker (`hostwork`)

    def host_next(self, run_id: str, holder: Claim, kinds: tuple[str, ...] = hostwork.KINDS, *,
                  wait: float = 0.0, fresh: bool = False) -> hostwork.HostWork:
        """The open requests of `kinds` that fit in one page, claimed for `holder`, by candidate,
        waiting up to `wait` seconds for a wave (`hostwork.gather`)."""
        return hostwork.gather(self.store.get(run_id), holder, kinds, wait=wait, fresh=fresh)

    def host_submit(self, run_id: str, answers: list[hostwork.Answer], holder: Claim | None = None) -> hostwork.Submitted:
        return hostwork.submit(self.store.get(run_id), answers, holder)

    def host_release(self, run_id: str, holder: Claim, kinds: tuple[str, ...] = hostwork.KINDS) -> int:
        return hostwork.release(self.store.get(run_id), holder, kinds)

    def host_read(self, run_id: str, request_id: str, offset: int, holder: Claim | None = None) -> hostwork.Page:
        return hostwork.read(self.store.get(run_id), request_id, offset, holder=holder)

    # inside

    def _launch(self, run: RunDir, spec_file: str | Path | None = None) -> None:
        try:
            detach.spawn(run, spec_file)
        except OSError as exc:
            raise UserError(f"cannot start the run's process: {exc}") from None

    def _started(self, run: RunDir, how: str, warnings: list[str]) -> Started:
        return Started(run_id=run.id, state="starting", folder=str(run.path), warnings=warnings,
                       message=f"{how} run {run.id}: it runs in its own process, detached",
                       next=f"{command('watch', run.id)} follows it")

    def _refuse_second_run(self, target: str, way: str) -> None:
        """A live run on `target`, however either names it (a symlink, ..) refuses a second; so does
        a run whose status cannot be read while its process lives. `way` ends the refusal: what the
        caller's own command can do besides waiting or cancelling."""
        real = os.path.realpath(target)
        for other in self.store.all():
            with contextlib.suppress(UserError):  # a lock that cannot be tested: its status says
                if not other.alive():  # no process: never live, whatever its status says (`recorded`); most of a store
                    continue
            try:
                status = other.status()
            except UserError:
                if other.alive():
                    raise UserError(f"run {other.id} is running but its status cannot be read, so whether it evolves "
                                    f"{target} is unknown; cancel it ({command('cancel', other.id)}), {way}") from None
                continue
            if status.state in LIVE and os.path.realpath(status.target) == real:
                raise UserError(f"run {other.id} is already evolving {target}; wait for it ({command('watch', other.id)}"
                                f") or cancel it, {way}")

    def _target_lock(self, target: str):
        """Held while one target's runs are checked and started, so that two starts cannot both pass."""
        locks = self.store.folder(".targets")
        name = hashlib.sha256(os.path.realpath(target).encode("utf-8")).hexdigest()[:16]
        return RunDir(locks).holding(f"{name}.lock", f"another run is being started on {target} right now; try again")


def _materials(spec: RunSpec) -> build.Materials:
    """The spec's materials, checked against the world and for keys they would carry (`keys`)."""
    parts = build.materials(spec)
    found = keys.problems(spec.keys_in_target, parts.content, parts.tasks, name=Path(spec.target).name)
    found += keys.asset_problems(parts.assets)
    if backups.interrupted(target_path(spec.target)) is not None:  # a run would start from a half-written target
        found.append(Problem(field="target", message=f"a write-back to it was interrupted and is half done; "
                                                     f"{command('restore', spec.target)} settles it, then plan again"))
    if found:
        raise SpecError(found)
    return parts


def _refuse_nested() -> None:
    """A run's rollout (an agent with our plugin, say, evolving that very plugin) may not start a run."""
    inside = os.environ.get(RUN_ENV)
    if inside:
        raise UserError(f"this process is part of run {inside} (a rollout of it): a run may not start another run "
                        "from inside itself; start runs from your own session")


def _with_own_pid(run: RunDir, status: RunStatus) -> RunStatus:
    """The status with the pid the run's process wrote in it; a process started a moment ago has not
    written it yet (it is still importing), so wait for it while the run is alive."""
    deadline = time.monotonic() + detach.STOP_GRACE_SECONDS
    while status.pid is None and run.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
        status = run.status()
    return status


def _split(spec: RunSpec, tasks: list[Task]) -> tuple[list[Task], list[Task]]:
    """The run's train and held-out tasks, as its process will split them. Raises `SpecError` on
    `max_calls` when the budget cannot pay for the smallest run on that split (`smallest.refusal`, as `evolve`):
    plan and start both split here, so a spec that plan quotes is one that start accepts."""
    train, held_out = split_tasks(tasks, spec.held_out_frac, random.Random(f"{spec.seed}:split"))
    why = refusal(_sizes(spec, train, held_out), max_calls=spec.budget.max_calls, tasks=len(tasks))
    if why:
        raise SpecError([Problem(field="budget.max_calls", message=why)])
    too_few = too_few_to_train(len(train), len(tasks), spec.held_out_frac, spec.policies.build().acceptance)
    if too_few:
        raise SpecError([Problem(field="tasks", message=too_few)])
    return train, held_out


def _sizes(spec: RunSpec, train: list[Task], held_out: list[Task]) -> Sizes:
    return Sizes.of(spec.policies, train=len(train), held_out=len(held_out), workers=spec.n_workers)


def _reply_limit(agent: AgentSpec) -> int | None:
    """The most tokens a reply of this model holds, as its options set it or its client's default;
    None where we cannot tell (a CLI agent, the host, your own code, a server's own limit)."""
    row = PROVIDERS.get(agent.kind)
    if row is None or row.kind != "http":
        return None
    limit = agent.options.get("max_tokens", row.option_default("max_tokens"))
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def _plan(spec: RunSpec, parts: build.Materials) -> Plan:
    train, held_out = _split(spec, parts.tasks)
    content = parts.strategy.render(parts.strategy.initial_state())
    chars = len(content) if isinstance(content, str) else sum(len(t) for t in content.values())
    prompt_chars = sum(len(t.prompt) for t in parts.tasks) // max(1, len(parts.tasks))
    sizes, policies = _sizes(spec, train, held_out), spec.policies
    cost = quote(sizes, rounds=spec.rounds, artifact_chars=chars, prompt_chars=prompt_chars, max_calls=spec.budget.max_calls,
                 price_per_call=spec.price_per_call, price_per_1k_tokens=spec.price_per_1k_tokens,
                 max_tokens=spec.budget.max_tokens,
                 reflections=policies.proposal.max_proposals, scouts=policies.proposal.scouts,
                 wave=policies.acceptance.wave, cheap_eval_tasks=spec.cheap_eval_tasks if spec.self_verify else None,
                 calibrate_train=spec.parallelism.batched and spec.budget.max_calls is None, gated=_gated(parts),
                 share=policies.validation.share)
    warnings = missing_keys(spec, parts.kind) + unsaved_sessions(spec) + cheaper_than_host(spec.agent.label, spec.reflector_spec.label,
                                                                    plugin=parts.kind == "plugin")
    own = [name for name, used in (("agent", spec.agent.kind == "python"), ("scorer", spec.scorer.ref is not None))
           if used]
    if own and spec.budget.rollout_timeout is None:
        warnings.append(f"no budget.rollout_timeout: a python: {' or '.join(own)} that never returns holds the run up "
                        "for good; set budget: {rollout_timeout: SECONDS}")
    warnings += [f"{moved} (the spec uses an earlier name of the field; it is read as such for now)" for moved in spec.moved]
    warnings += size_warnings(train=len(train), held_out=len(held_out), workers=spec.n_workers,
                              held_out_frac=spec.held_out_frac, artifact_chars=chars, minibatch=sizes.minibatch)
    warnings += unsaved_text(parts.assets) + root_config_warnings(spec, parts) + layout_warnings(spec, parts.kind, parts.tree)
    if parts.tree is not None:
        editable = {path: parts.tree[path] for path in Governance.of(parts.strategy).changeable(parts.tree)}
        warnings += whole_file_warnings(editable, reply_limit=_reply_limit(spec.reflector_spec),
                                        reflector=spec.reflector_spec.label)
        warnings += unmatched_editable(spec.editable, parts.tree, spec.target)
    warnings += budget_warnings(cost=cost, sizes=sizes, max_tokens=spec.budget.max_tokens, rounds=spec.rounds)
    warnings += held_out_warnings(sizes, rounds=spec.rounds, tasks=len(parts.tasks))
    price = f", {said}" if (said := money(cost)) else ""
    return Plan(target=spec.target, kind=parts.kind, files=None if parts.tree is None else len(parts.tree),
                carried=sorted(parts.assets)[:SHOWN_CARRIED], carried_total=len(parts.assets),
                tasks=len(parts.tasks), train=len(train), held_out=len(held_out), agent=spec.agent.label,
                reflector=spec.reflector_spec.label, n_workers=spec.n_workers, rounds=spec.rounds, quote=cost,
                warnings=warnings, next=f"about {cost.calls_low}-{cost.calls_high} calls{price}: if that suits, "
                                        "start it with evolve")


def _gated(parts: build.Materials) -> bool:
    """Whether the blast radius makes a file a diff may change L1: the quote then counts the L1 gate."""
    if parts.tree is None or not parts.blast_radius:
        return False
    rules = Governance.of(parts.strategy, parts.blast_radius)
    return rules.gated(rules.changeable(parts.tree))


def _with_leftovers(run: RunDir, status: RunStatus) -> RunStatus:
    """`status`, saying how many programs an interrupted run's process left running (they go on
    spending) and that `cancel` stops them."""
    if status.state == "interrupted" and (left := len(leftovers.left_running(run))):
        return status.model_copy(update={"message": f"{status.message}; {left} program(s) it started still run",
                                         "next": f"{command('cancel', run.id)} stops them; {status.next}"})
    return status
