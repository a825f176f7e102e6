"""Where a run starts, and how an interrupted one is taken up again: the loop's side of persistence.

`seed_artifact` puts the artifact into the ledger once, whichever process gets there first;
`resumable` says whether the checkpoint on the store is this run's (the same fingerprint, not
finished); `take_up` restores what the files hold into the run's parts (the bill, the evaluation
cache, the rollouts left in flight, run first) and reads back the rounds that committed after the
checkpoint; `position` is what the loop writes in a checkpoint after every round;
`finished_result` is the result of a run whose checkpoint says it ended, for one killed before it
recorded that result.

    saved, notes = resumable(files, kind, fingerprint)
    recovered = take_up(files, saved, evaluator=..., tasks=..., ledger=...)   # a resumed run
    files.save(position(...))                                                  # after each round

Left out: the files themselves (`checkpoint`) and the loop's own state (the loop).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.persist.checkpoint import Checkpoint, RunFiles
from agentdescent.errors import BudgetSpent, HeadMoved, UserError
from agentdescent.ledger import Ledger
from agentdescent.result import EvolveResult, StepRecord
from agentdescent.types import Outcome, Task
from agentdescent.usage import Usage


@dataclass(kw_only=True)
class Recovered:
    """Where an interrupted run goes on: the outcomes of the rounds it finished (`kept`), and the
    rounds that committed after the checkpoint, done, with their diffs' outcomes (those the
    checkpoint holds, and the rest read off the commits)."""

    kept: list[Outcome] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    history: list[StepRecord] = field(default_factory=list)
    next_round: int = 0
    rounds: int = 0


def take_up(files: RunFiles, saved: Checkpoint, *, evaluator: Evaluator, tasks: Mapping[str, Task],
            ledger: Ledger) -> Recovered:
    """Restore the run's bill and cache from its files, run what was left in flight, and read back
    the rounds that committed after the checkpoint. The outcomes a round left unfinished had
    (the run stopped while it told them) go with it: it runs again, or its commit is read back."""
    committed = sorted(committed_rounds(ledger, saved.next_round).items())
    hidden = None if committed else saved.dealt_after  # a round read back is done: all it ran is known
    evaluator.preload(files.restore(saved, evaluator.usage, tasks), unseen_from=hidden)
    try:  # what was in flight when the last process stopped: first
        evaluator.run_queue(files.take_queue(), tasks, unseen=hidden is not None)
    except BudgetSpent:
        pass  # the rounds stop at once on the same budget, and say so
    recovered = Recovered(next_round=saved.next_round)
    unfinished: list[Outcome] = []
    for outcome in saved.outcomes:
        late = outcome.step is not None and outcome.step >= saved.next_round
        (unfinished if late else recovered.kept).append(outcome)
    recorded = {record.round for record in saved.history}
    for round_, (version, diff_ids) in committed:
        told = [o for o in unfinished if o.step == round_]
        said = {o.diff_id for o in told}
        outcomes = told + [Outcome(diff_id=diff_id, kind="committed", step=round_, version=version,
                                   reason=f"landed in version {version} before the run was interrupted (read back "
                                          f"from the ledger)") for diff_id in diff_ids if diff_id not in said]
        recovered.outcomes += outcomes
        if round_ not in recorded:
            recovered.history.append(StepRecord(round=round_, base_version=version - 1, version=version,
                                                diffs=diff_ids, outcomes=dict(Counter(o.kind for o in outcomes)),
                                                calls=evaluator.usage.calls))
        recovered.next_round, recovered.rounds = round_ + 1, recovered.rounds + 1
    return recovered


def position(files: RunFiles, evaluator: Evaluator, **fields: object) -> Checkpoint:
    """The checkpoint of the loop's `fields` (see `Checkpoint`), with the run's usage and how many
    journal lines it counts, read at one instant (`RunFiles.counted`)."""
    usage, counted, answered = files.counted(evaluator.usage)
    # Validated as any Checkpoint is: the loop's fields are checked by the model, not by their spelling here.
    return Checkpoint.model_validate({**fields, "usage": usage, "rollouts_counted": counted, "answers_counted": answered})


def resumable(files: RunFiles, strategy: str, fingerprint: str) -> tuple[Checkpoint | None, list[str]]:
    """The checkpoint a run with this strategy (its `kind`) and fingerprint resumes from
    (None: it starts anew), and what the user should hear about it. A run whose files show it had
    begun but whose checkpoint is gone is refused: started anew, it would forget its bill."""
    saved = files.load(strict=True)
    if saved is None:
        begun = files.begun()
        if begun:
            raise UserError(f"the run on this ledger had begun ({begun}) but its checkpoint {files.checkpoint_path} "
                            f"is missing; nothing was reset. Put it back, or move the folder {files.folder} away to "
                            "start a run on this ledger anew (its bill then starts again)")
        return None, []
    notes = []
    if saved.strategy != strategy:
        notes.append(f"the artifact in this store was last evolved with strategy {saved.strategy}; this run "
                     f"uses {strategy}, which may read its keys differently")
    if saved.finished:
        return None, notes
    if saved.fingerprint != fingerprint:
        notes.append("the store holds an unfinished run with other settings (tasks, split, seed or strategy); "
                     "this run does not resume it and starts from the ledger's head")
        return None, notes
    return saved, notes


def committed_rounds(ledger: Ledger, since_round: int) -> dict[int, tuple[int, list[str]]]:
    """{round: (version, diff ids)} of the commits on `dev` made in rounds from `since_round` on,
    newest first in the log, read from their `Round` trailers (1-based)."""
    found: dict[int, tuple[int, list[str]]] = {}
    for record in ledger.log():
        number = record.trailers.get("Round", "")
        if not number.isdigit():
            if number == "seed":
                break
            continue
        round_ = int(number) - 1
        if round_ < since_round:
            break
        diffs = [d for d in record.trailers.get("Diffs", "").split(",") if d]
        found[round_] = (record.version, diffs)
    return found


def seed_artifact(ledger: Ledger, artifact_id: str, strategy: Strategy) -> int:
    """Head, once the ledger holds the artifact and `stable` has a version of it.

    The strategy's initial state is committed when the ledger lacks the artifact; a process
    seeding the same store at the same time is no error (the later one takes the other's seed).
    A `stable` left before the artifact existed (a kill between the seed and its promotion) moves
    to the first version that has it."""
    while not ledger.has_artifact(artifact_id, head := ledger.head()):
        try:
            ledger.commit(artifact_id, strategy.initial_state(), expected_version=head,
                          message=f"seed {artifact_id}", trailers={"Round": "seed"})
        except HeadMoved:
            continue  # another writer moved dev first: look again
    stable = ledger.stable()
    if not ledger.has_artifact(artifact_id, stable):
        ledger.promote(next(v for v in range(stable + 1, head + 1) if ledger.has_artifact(artifact_id, v)))
    return head


def finished_result(ledger_path: Path, strategy: Strategy, artifact_id: str) -> EvolveResult | None:
    """The result of the run on this ledger when its checkpoint says it ended (its process was
    killed after that and before the result was recorded), read from the checkpoint and the ledger
    with nothing run again; None when it did not end. A run of the store resumed then records this
    instead of starting a new run, which would take the bill and the history for another run's."""
    saved = RunFiles(ledger_path).load(strict=True)
    if saved is None or not saved.finished:
        return None
    with Ledger(ledger_path) as ledger:
        stable = ledger.stable()
        state, initial = ledger.snapshot(artifact_id, stable), ledger.snapshot(artifact_id, saved.initial_version)
    return EvolveResult(
        rendered=strategy.render(state), state=state, final_reward=saved.best, initial_reward=saved.initial_reward,
        history=saved.history, ledger_path=Path(ledger_path), outcome_list=saved.outcomes,
        usage=Usage.from_record(saved.usage), stop_reason=saved.stop_reason or "finished", error=None, version=stable,
        initial_version=saved.initial_version, initial_state=initial, initial_rendered=strategy.render(initial),
        frozen=tuple(strategy.frozen), left_out=tuple(getattr(strategy, "left_out", None) or ()), warnings=list(saved.warnings))
