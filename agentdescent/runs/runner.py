"""The process a detached run lives in: `python -m agentdescent.runs.runner RUN_FOLDER`.

It holds the run's lock for its whole life (so the store can tell it is alive), builds the run
from what the run's folder keeps (the spec, the tasks, the target as it was), and runs `evolve`
on the run's own ledger, which resumes from the ledger's checkpoint when there is one: a first
start and a resume are the same code. A run that had begun and lost its checkpoint is refused
(`checkpointed`), and so is one whose ledger something else damaged (`LedgerDamaged`), each
saying what to do instead. Every event goes to `events.jsonl` and into `status.json`; the
result goes to `result.json` at the end. SIGTERM or SIGINT (what `cancel` sends) cancels the
run: waits wake, the agents' and graders' processes are killed, what was committed stays, and
the status says `cancelled`. The run's folder deleted or moved away stops it the same way, and
nothing is written to make that folder again. Left out: starting this process (`detach`) and
reading its files (the service).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import shlex
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from agentdescent import events as ev
from agentdescent import process, procscan, reading
from agentdescent.agents.redact import redact
from agentdescent.commands import command
from agentdescent.engine.calls import units
from agentdescent.engine.calls.cancel import CancelToken
from agentdescent.engine.evolve import evolve
from agentdescent.engine.persist.resume import finished_result
from agentdescent.errors import AgentDescentError, Cancelled, LedgerDamaged, UserError
from agentdescent.quoting import bounded, described
from agentdescent.result import EvolveResult
from agentdescent.runs import build, checkpointed, leftovers, origin, review, runlog, sealed, wiring
from agentdescent.runs.host import PROPOSAL, ROLLOUT, Approver, HostAgent
from agentdescent.runs.hostwork import waiting_on
from agentdescent.runs.mailbox import Mailbox
from agentdescent.runs.rolloutdir import clear, rollout_folder
from agentdescent.runs.rootconfig import root_config_of_stored
from agentdescent.runs.spec import AgentSpec
from agentdescent.runs.status import RunStatus, StatusTracker
from agentdescent.runs.store import RUN_ENV, RUN_FOLDER_ENV, RunDir

ALREADY_RUNNING = 3
USER_CANCEL = "cancelled by the user"  # what SIGTERM (agentdescent cancel) and SIGINT say


def main(argv: list[str], log: runlog.Captured | None = None) -> int:
    """`runner RUN_FOLDER [--lock-fd N]`: N is the run's lock, already taken by the spawner. `log`,
    what the process prints, is closed before the lock is let go: a run seen to have ended has its
    whole log written."""
    run = RunDir(Path(argv[1]).absolute())
    try:
        fd = int(argv[3]) if argv[2:3] == ["--lock-fd"] else run.lock()
    except AgentDescentError as exc:
        print(f"agentdescent runner: {exc}", file=sys.stderr)
        return ALREADY_RUNNING
    # Handed over inheritable; a program the run starts without closing descriptors (`os.system("cmd &")`)
    # would hold the lock past this process's death, and the run would look alive for as long.
    os.set_inheritable(fd, False)
    try:
        left = leftovers.stop_left(run)
        if left:
            print(f"agentdescent runner: stopped {left} program(s) an earlier process of this run left running",
                  file=sys.stderr, flush=True)
        return _live(run)
    except BaseException:  # a bug past _live's own handling: its traceback in the log while there is one
        traceback.print_exc()
        raise
    finally:
        # What its programs left behind in sessions of their own; not looked for when calls it gave
        # up on spin on (each hogs the interpreter, and the look would take minutes) unless it
        # started programs itself.
        if process.started() or not units.abandoned():
            leftovers.stop_left(run)
        if log is not None:
            log.close()
        os.close(fd)


def _live(run: RunDir) -> int:
    os.environ[RUN_ENV], os.environ[RUN_FOLDER_ENV] = run.id, leftovers.mark(run)
    _enter_origin(run)
    status = run.status()
    token = CancelToken()
    tracker = StatusTracker(status.model_copy(update={"state": "starting", "pid": os.getpid(),
                                                      "pid_start": procscan.started_at(os.getpid()), "error": None,
                                                      "stop_reason": None, "next": ""}), _status_writer(run, token))
    tracker.update(message="starting")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: token.cancel(USER_CANCEL))
    token.on_cancel(process.kill_all)
    try:
        lost = checkpointed.lost(run, status, read_ledger=True)
        if lost:  # a resume would start it over and bill its calls again
            tracker.update(state="failed", error=lost, message=f"not resumed: {bounded(lost, 200)}",
                           next=f"it cannot be resumed: {checkpointed.instead(run)}")
            return 1
        result = _evolve(run, tracker, token)
    except LedgerDamaged as exc:  # something else changed its ledger: going on would build on what is lost
        tracker.update(state="failed", error=f"run {run.id}'s ledger is damaged: {exc.what}; something other than "
                                             f"AgentDescent changed {run.ledger}",
                       message=f"stopped: its ledger is damaged ({bounded(exc.what, 200)})", next=_mend(run, exc))
        return 1
    except AgentDescentError as exc:  # refused before the rounds (the spec, the world): say so, plainly
        if isinstance(exc, Cancelled) and token.reason == USER_CANCEL:  # cancelled while it was starting
            when = f"while it resumed at round {status.round}" if status.round else "before its first round"
            tracker.update(state="cancelled", message=f"cancelled {when}",
                           next=f"{command('resume', run.id)} {'goes on' if status.round else 'starts it again'}")
            return 1
        began = "stopped" if tracker.status.state == "running" else "could not start"
        tracker.update(state="failed", error=bounded(str(exc)), message=f"the run {began}: {bounded(str(exc), 200)}",
                       next=_after_a_fix(run))
        return 1
    except OSError as exc:  # the run's own folder cannot be written (a full disk): say so where we still can
        said = exc.strerror or str(exc)
        tracker.update(state="failed", error=f"cannot write the run's files in {run.path}: {said}",
                       message=f"stopped: couldn't write the run's files ({said})",
                       next=f"free some space, then: {command('resume', run.id)}")
        return 1
    except BaseException as exc:  # a bug, or what a user's call raised past Exception: keep the traceback, say where
        with contextlib.suppress(OSError):  # the log may be on a full disk too
            print(redact(traceback.format_exc()), file=sys.stderr, flush=True)
        tracker.update(state="failed", error=described(exc),
                       message=f"the run failed unexpectedly; the traceback is in {run.file('run.log')}",
                       next=f"{command('resume', run.id)} tries again from the last checkpoint")
        return 1
    _finish(run, tracker, result, token)
    return 0 if result.error is None else 1


def _after_a_fix(run: RunDir) -> str:
    """What to do about a failed run: a resume runs the spec stored with it (`sealed`), so a fix
    to the spec itself takes a new run."""
    return (f"fix what the error says, then: {command('resume', run.id)}; a resume runs the spec stored with the run, "
            "so after a fix to the spec start a new run instead: agentdescent evolve SPEC")


def _mend(run: RunDir, damage: LedgerDamaged) -> str:
    """What to do about a run whose ledger is damaged: a ref put back where git's reflog says it
    last was (git itself refuses to move a ref it cannot read: its file goes first), or a new run."""
    ref = damage.ref
    was = _last_logged(run.ledger, ref) if ref is not None else None
    if ref is None or was is None:
        return f"it cannot be resumed: {checkpointed.instead(run)}"
    broken = run.ledger / ref
    put_back = f"git -C {shlex.quote(str(run.ledger))} update-ref {damage.ref} {was}"
    if os.path.lexists(broken):
        put_back = f"rm {shlex.quote(str(broken))} && {put_back}"
    return (f"git's reflog says {damage.ref} was last at {was}: put it back ({put_back}), then: "
            f"{command('resume', run.id)}; or {checkpointed.instead(run)}")


def _last_logged(ledger: Path, ref: str) -> str | None:
    """The commit git's reflog of `ref` says it last pointed at; None without one (git keeps none for
    a ledger unless core.logAllRefUpdates says so)."""
    try:
        lines = reading.read_text(ledger / "logs" / ref, what="reflog", limit=16 << 20, follow_symlinks=False)
    except UserError:
        return None
    fields = lines.strip().rsplit("\n", 1)[-1].split(" ")
    return fields[1] if len(fields) > 1 and re.fullmatch("[0-9a-f]{40}", fields[1]) else None


def _status_writer(run: RunDir, token: CancelToken) -> Callable[[RunStatus], None]:
    """The run's status written; its folder gone (deleted, or moved out of the store) cancels the
    run, and the programs it started with it, and the status is not written: only the store's
    `create` makes a run's folder, so a deleted run stays deleted and a moved one is in one store."""

    def write(status: RunStatus) -> None:
        try:
            run.write_status(status)
        except FileNotFoundError:
            if run.path.is_dir():
                raise
            if not token.cancelled:
                print(f"agentdescent runner: the run's folder {run.path} is gone (deleted, or moved out of the store); "
                      "the run stops, and writes nothing there again", file=sys.stderr, flush=True)
            token.cancel(f"the run's folder {run.path} is gone (deleted, or moved out of the store)")

    return write


def _ends_a_line(path: Path) -> bool:
    """Whether the file's last byte ends a line (read alone: the file may be large)."""
    with open(path, "rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


def _enter_origin(run: RunDir) -> None:
    """Work where the run was started from, as the user's own program would: a grader command or
    a `python:` ref is found there (and only such a ref's module: `userimport`). A folder gone since
    (a reboot cleared it) leaves the run's own."""
    try:
        folder = origin.folder(run)
        os.chdir(folder)
    except (OSError, ValueError, KeyError, TypeError):
        os.chdir(run.path)


def _evolve(run: RunDir, tracker: StatusTracker, token: CancelToken) -> EvolveResult:
    sealed.check(run)
    spec, tasks = run.spec(), run.tasks()
    content = review.initial(run)
    parts = build.assemble(spec, tasks, content, run.assets(), run.executable())
    reward = build.reward(spec)  # the user's code: imported here only
    mailbox = Mailbox(run.file("mailbox"))
    mailbox.clear()  # requests of an earlier process of this run: nobody waits for them now

    def waits() -> None:  # what the run waits on, in its status as requests come and go (read once a write)
        tracker.update_later(waiting_on=lambda: waiting_on(run))

    def make_agent(agent: AgentSpec, role: str):
        if agent.kind == "host":
            kind = ROLLOUT if role == "rollout" else PROPOSAL
            return HostAgent(mailbox, kind, timeout=spec.host_timeout, gone=lambda: token.cancelled, changed=waits,
                             template=spec.prompt if kind == ROLLOUT else None)
        return wiring.make_client(agent, "reflector" if role != "rollout" and spec.reflector is not None else "agent")

    ended = finished_result(run.ledger, parts.strategy, spec.artifact_id) if run.ledger.is_dir() else None
    if ended is not None:  # killed after the run ended, before its result was recorded: nothing runs again
        clear(run.id)  # the workspaces that process left
        return ended
    with rollout_folder(run.id) as workspaces:  # away from the run's tasks and the user's home (rolloutdir)
        run_fn, propose = wiring.callables(spec, parts, make_agent=make_agent, workdir=workspaces)
        events = run.appending("events.jsonl")
        try:
            if events.tell() and not _ends_a_line(run.file("events.jsonl")):
                events.write("\n")  # a line an earlier process was killed in the middle of ends here

            def on_event(event: ev.Event) -> None:
                try:
                    events.write(redact(json.dumps(ev.to_json(event), ensure_ascii=False)) + "\n")
                    events.flush()
                    tracker.on_event(event)
                except OSError as exc:  # a full or read-only disk: stop cleanly, keep what was committed
                    token.cancel(f"cannot write the run's files in {run.path} ({exc.strerror or exc}); "
                                 f"free some space, then: {command('resume', run.id)}")

            approver = Approver(mailbox, timeout=spec.host_timeout, gone=lambda: token.cancelled, changed=waits)
            return evolve(parts.tasks, reward, run=run_fn, propose=propose, strategy=parts.strategy,
                          blast_radius=parts.blast_radius, stop=[token], store=run.ledger, on_event=on_event,
                          **spec.evolve_options(approve=approver))
        finally:
            with contextlib.suppress(OSError):  # on a full disk the line a failed write left in the buffer is lost
                events.close()
            with contextlib.suppress(OSError):  # its folder deleted: nothing is left to withdraw
                mailbox.clear()  # the run has ended: none of its requests is pending, whatever still waits on one


def _finish(run: RunDir, tracker: StatusTracker, result: EvolveResult, token: CancelToken) -> None:
    done = dict(waiting_on=None, stop_reason=result.stop_reason, best_reward=result.final_reward, stable_version=result.version,
                initial_reward=result.initial_reward, calls=result.usage.calls, tokens=result.usage.tokens,
                estimated_tokens=result.usage.estimated_tokens,
                cost_usd=result.usage.model.cost_usd, unpriced=result.usage.unpriced,
                failures=result.usage.failures, failure=bounded(result.usage.errors[0]) if result.usage.errors else None,
                outcomes=result.outcomes(), warnings=[*root_config_of_stored(run), *result.warnings], round=len(result.history) and
                result.history[-1].round + 1)
    try:
        # A key reaches the state only in a model's reply (a target holding one is refused or masked
        # before the run, runs.keys), so this redaction alters nothing the user wrote.
        run.write("result.json", redact(result.to_json()))
    except OSError as exc:
        tracker.update(state="failed", **done, error=f"cannot write the result in {run.path}: {exc.strerror or exc}",
                       message=f"stopped ({result.stop_reason}) but the result could not be written",
                       next=f"free some space, then: {command('resume', run.id)}")
        return
    change = ("held-out reward not measured yet" if result.initial_reward is None or result.final_reward is None
              else f"held-out {result.initial_reward:.3f} -> {result.final_reward:.3f}"
              + (f" (± {result.final_margin:.3f})" if result.final_margin else "")
              + (f"; version {result.unmeasured} was committed but never measured on the held-out tasks (see the "
                 "warnings)" if result.unmeasured is not None else ""))
    if result.error == "cancelled" and token.reason != USER_CANCEL:  # the run cancelled itself: a failure
        tracker.update(state="failed", error=bounded(token.reason), **done, message=f"stopped: {bounded(token.reason)}",
                       next=_after_a_fix(run))
    elif result.error == "cancelled":
        tracker.update(state="cancelled", **done, message=f"cancelled at round {done['round']}; {change} so far",
                       next=f"{command('resume', run.id)} continues it; {command('show', run.id)} shows the change so far")
    elif result.error is not None:
        why = bounded(result.stop_reason)  # most reasons say so already ("stopped before the first round: ...")
        tracker.update(state="failed", error=bounded(result.error), **done,
                       message=why if why.startswith("stopped") else f"stopped: {why}",
                       next=_after_a_fix(run))
    else:
        tracker.update(state="finished", error=None, **done, message=f"finished ({result.stop_reason}); {change}"
                       f"{_declined(result)}", next=_after_finishing(run, result))


def _declined(result: EvolveResult) -> str:
    """The L1 diffs that passed the test and that the approver declined or left unanswered, if any:
    counted with the refused, they would read as changes no test found an improvement."""
    n = result.outcomes().get("declined", 0)
    if not n:
        return ""
    return f"; {n} L1 diff{'s' if n != 1 else ''} passed the test but {'were' if n != 1 else 'was'} declined or went unanswered"


def _after_finishing(run: RunDir, result: EvolveResult) -> str:
    """What to do with a finished run: review and write back its change, or, with none, nothing to write."""
    if result.state == result.initial_state and result.unmeasured is None:
        return (f"nothing to write back: the run's best version is the target as it was; {command('show', run.id)} "
                f"says why each diff was refused, {command('reject', run.id)} closes the run")
    return (f"{command('show', run.id)} shows the change; {command('accept', run.id)} writes it back (backing the "
            f"target up first), {command('reject', run.id)} drops it")


def _give_back_freed_blocks() -> None:
    """Have glibc map each block of 128 KB or more on its own, so that it goes back to the system
    once freed. By default glibc raises that threshold to the largest block freed so far (up to
    32 MB), and then keeps a freed block of a large target's size (its JSON, a reflection's prompt)
    in the arena of the thread that freed it: with a pool of threads the process holds several
    times what it uses. Not glibc (macOS, musl): nothing to do."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(_M_MMAP_THRESHOLD, 128 << 10)


_M_MMAP_THRESHOLD = -3  # malloc.h


if __name__ == "__main__":
    _give_back_freed_blocks()
    log = runlog.capture()  # what this process and its programs print, redacted on its way to run.log
    logging.basicConfig(level=logging.WARNING)
    try:
        code = main(sys.argv, log)
    except BaseException:  # noqa: BLE001 -- printed (to the log when it is still open); the process ends below all the same
        traceback.print_exc()
        code = 1
    logging.shutdown()
    log.close()  # when main did not (the run's lock was never taken)
    # A user's call abandoned past its timeout may still spin in a thread of its own: the run has
    # ended and said so, and nothing it could still do is wanted, so this process ends now.
    os._exit(code)
