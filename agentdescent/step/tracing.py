"""Tracing what a fused candidate breaks to its culprits: the components that break a task head
passes alone, found by bisection (`bisect`) and each judged on what it fixes against what it
breaks. A culprit made of diffs merged on one file is split into them, each judged alone: the
merge is no reason to lose a good diff with a harmful one, nor to let the harmful one ride in on
the other's gain. What it leaves out: the waves of probes that find the broken tasks (`accept`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent.artifacts.state import State, apply
from agentdescent.quoting import first_of
from agentdescent.step.bisect import culprits, search_all
from agentdescent.step.changes import Component
from agentdescent.step.policies import Verdict
from agentdescent.step.textmerge import stacked_onto
from agentdescent.step.trial import Trial, unique
from agentdescent.types import Task


@dataclass(kw_only=True)
class Candidate:
    """Components fused into one state, and its rewards so far by task id."""

    parts: list[Component]
    state: State
    rewards: dict[str, float] = field(default_factory=dict)
    first: list[Task] = field(default_factory=list)  # its first wave of probes, when scored with the evidence
    opened: list[Task] = field(default_factory=list)  # that first wave whole: the parts' evidence and `first`
    settled: dict[str, bool] = field(default_factory=dict)  # with samples: probes drawn again -> broken in both pairs
    probed: set[str] = field(default_factory=set)  # the probes it was scored on (beside its parts' evidence)


@dataclass(frozen=True, kw_only=True)
class Traced:
    guilty: list[Component]  # the components that failed their judgement, out of the candidate
    cleared: set[str]  # the broken tasks of the groups that passed it: a culprit kept answers for them
    answered: set[str]  # those of the groups that failed it, none of whose diffs stays
    pieces: list[Component]  # diffs of a guilty merged component that pass alone: each now a component


def trace(trial: Trial, cand: Candidate, broken: list[str]) -> Traced:
    """Bisect each task `cand` breaks down to the groups of its parts that break it alone; judge
    each group on what it fixes against what it breaks, and a guilty component of merged diffs
    each diff alone (`_split`)."""
    train, parts, answers = trial.judge.train, cand.parts, trial.answers
    answers.update({(tuple(parts), i): cand.rewards[i] for i in broken})  # the whole set, measured

    def ask(wave: list[tuple[str, list[Component]]]) -> list[bool]:
        jobs: dict[tuple[Component, ...], tuple[list[Component], list[Task]]] = {}
        for task_id, subset in wave:
            jobs.setdefault(tuple(subset), (subset, []))[1].append(train[task_id])
        states = {key: fuse(trial.head_state, subset) for key, (subset, _) in jobs.items()}
        rows = trial.score([(states[key], ts) for key, (_, ts) in jobs.items()])
        for key, (_, ts), row in zip(jobs, jobs.values(), rows):
            answers.update(((key, t.id), r) for t, r in zip(ts, row))
        if trial.noisy:  # "it breaks" is drawn again, and stands only when it breaks again
            doubt = {key: [t for t in ts if answers[(key, t.id)] < trial.head[t.id]] for key, (_, ts) in jobs.items()}
            doubt = {key: ts for key, ts in doubt.items() if ts}
            if doubt:
                assert trial.judge.again is not None
                for key, row in zip(doubt, trial.judge.again([(states[key], ts) for key, ts in doubt.items()])):
                    for t, r in zip(doubt[key], row):
                        answers[(key, t.id)] = r if r < trial.head[t.id] else max(r, answers[(key, t.id)])
        return [answers[(tuple(subset), task_id)] < trial.head[task_id] for task_id, subset in wave]

    found = search_all({task_id: culprits(parts, trial.policy.split) for task_id in broken}, ask)
    groups: dict[tuple[Component, ...], list[Component]] = {}
    for task_id, task_groups in found.items():
        for group in task_groups:
            key = tuple(group)
            groups[key] = group
            trial.charged.setdefault(key, []).append(task_id)  # with what it broke in earlier waves
    traced = Traced(guilty=[], cleared=set(), answered=set(), pieces=[])
    for key, group in groups.items():
        tasks = trial.charged[key]
        verdict = _alone(trial, group, key, tasks, answers)
        if verdict.accepted:
            traced.cleared.update(tasks)
            continue
        traced.guilty.extend(group)
        shown = first_of(tasks, 5)
        what = "together with " + str(len(group) - 1) + " other diffs " if len(group) > 1 else ""
        piece = _split(trial, group[0], tasks) if len(group) == 1 and len(group[0].changes) > 1 else None
        if piece is None:
            traced.answered.update(tasks)
            trial.reject(group, f"rejected: {what}breaks {shown}, which head passes ({verdict.reason})")
            continue
        traced.pieces.append(piece)
        kept = piece.changes[0].diff.id
        trial.reject([Component(changes=[c for c in group[0].changes if c.diff.id != kept], after={})],
                     f"rejected: merged with {kept} on {', '.join(sorted(group[0].fused_keys))}, it breaks {shown}, "
                     f"which head passes, and {kept} alone does not ({verdict.reason})")
    return traced


def _split(trial: Trial, merged: Component, broken: list[str]) -> Component | None:
    """The diff of `merged` (diffs merged on one file, found guilty) that, alone, breaks none of
    the tasks `merged` broke and fixes one of the failures it was made from (`Trial.fixing`), the
    one with the most gain where several do (together they broke what each alone does not: only
    one may stay); None when none does. All of them are scored in one wave. The fusion it joins
    is scored again on the broken tasks, so a break this one draw missed still shows."""
    train = trial.judge.train
    pieces = [Component(changes=[c], after=c.after) for c in merged.changes]
    states = [apply(trial.head_state, piece.after) for piece in pieces]
    sets = [evidence_tasks(piece, train) for piece in pieces]
    rows = trial.score([(state, [*ts, *(train[i] for i in broken)]) for state, ts in zip(states, sets)])
    clean = [(piece, state, ts, row[:len(ts)]) for piece, state, ts, row in zip(pieces, states, sets, rows)
             if all(r >= trial.head[i] for i, r in zip(broken, row[len(ts):]))]
    fixing = trial.fixing([(state, ts, fixed) for _, state, ts, fixed in clean])
    passing = [(sum(fixed) - sum(trial.head[t.id] for t in ts), piece)
               for (piece, _, ts, fixed), fixes in zip(clean, fixing) if fixes]
    return max(passing, key=lambda found: found[0])[1] if passing else None


def _alone(trial: Trial, group: list[Component], key: tuple[Component, ...], broken: list[str],
           answers: Mapping[tuple[tuple[Component, ...], str], float]) -> Verdict:
    """A culprit group on its own: its evidence (for one component, measured in the evidence stage
    and so cached) and the tasks it breaks."""
    evidence = unique([t for comp in group for t in evidence_tasks(comp, trial.judge.train)])
    row = trial.score([(fuse(trial.head_state, group), evidence)])[0]
    candidate = row + [answers[(key, i)] for i in broken]
    head = [trial.head[t.id] for t in evidence] + [trial.head[i] for i in broken]
    return trial.test([t.id for t in evidence] + broken, candidate, head, gated=False)


def evidence_tasks(component: Component, train: Mapping[str, Task]) -> list[Task]:
    """The train tasks the component's diffs were made from."""
    changes = [*component.changes, *component.echoes]
    return unique([train[t] for c in changes for t in c.diff.evidence.task_ids if t in train])


def fuse(head_state: State, components: Sequence[Component]) -> State:
    """Head with the components' edits; where two hold one key, each only inserts lines there
    (`resolve` stacks nothing else), and the key holds both insertions."""
    merged: dict[str, str | None] = {}
    for comp in components:
        for key, text in comp.after.items():
            merged[key] = stacked_onto(head_state.get(key, ""), merged.get(key), text)
    return apply(head_state, merged)
