"""Commit: the last stage of the optimizer step, a compare-and-swap of the accepted candidate onto `dev`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentdescent.artifacts.state import State, apply
from agentdescent.errors import HeadMoved
from agentdescent.ledger import Ledger
from agentdescent.step.accept import Acceptance
from agentdescent.step.policies import StepPolicies
from agentdescent.step.rebase import onto
from agentdescent.types import Edit


def commit_message(step: int, acceptance: Acceptance) -> tuple[str, dict[str, str]]:
    """Subject and trailers of the commit of round index `step`, which people read 1-based:
    commit_message(0, ...)[0] == "round 1: 2 diffs on 2 keys, acceptance 0.250 -> 0.500"."""
    changes = [c for comp in acceptance.accepted for c in comp.changes]
    keys = sorted({k for comp in acceptance.accepted for k in comp.after})
    subject = f"round {step + 1}: {_count(len(changes), 'diff')} on {_count(len(keys), 'key')}"
    if acceptance.head_reward is not None and acceptance.candidate_reward is not None:
        subject += f", acceptance {acceptance.head_reward:.3f} -> {acceptance.candidate_reward:.3f}"
    trailers = {
        "Round": str(step + 1),
        "Diffs": ",".join(c.diff.id for c in changes),
        "Authors": ",".join(c.diff.author or "-" for c in changes),
        "Base-Versions": ",".join(str(c.diff.base_version) for c in changes),
        "Staleness": ",".join(str(c.staleness) for c in changes),
        "Staleness-Decisions": ",".join(c.decision for c in changes),
        "Eta": ",".join(f"{c.eta:g}" for c in changes),
        "Keys": keys_trailer(keys),
        "Reward-Head": f"{acceptance.head_reward:.4f}" if acceptance.head_reward is not None else "-",
        "Reward-Candidate": f"{acceptance.candidate_reward:.4f}" if acceptance.candidate_reward is not None else "-",
    }
    approved = [acceptance.approved[c.diff.id] for c in changes if c.diff.id in acceptance.approved]
    if approved:  # the L1 changes an approver said yes to, by the ids it was asked them under
        trailers["Approved"] = ",".join(dict.fromkeys(approved))
    return subject, trailers


def keys_trailer(keys: list[str]) -> str:
    """The `Keys` trailer: the keys joined by ",", a comma or a percent sign in one escaped (a
    file may be named "notes, draft.md"). keys_trailer(["a,b", "c"]) == "a%2Cb,c" """
    return ",".join(key.replace("%", "%25").replace(",", "%2C") for key in keys)


def trailer_keys(text: str) -> list[str]:
    """The keys a `Keys` trailer names. trailer_keys("a%2Cb,c") == ["a,b", "c"]"""
    return [part.replace("%2C", ",").replace("%25", "%") for part in text.split(",") if part]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class AlreadyLanded(Exception):
    """Carried onto the head another writer moved `dev` to, the change turns out to be there
    already (two runs on one store made it): nothing is left to commit."""

    def __init__(self, version: int) -> None:
        super().__init__(f"another writer committed the same change first, in version {version}")
        self.version = version


class CarriedUnreadable(Exception):
    """Carried onto the head another writer moved `dev` to, the change merges without a conflict
    but leaves a file unreadable that the new head leaves readable: two edits that each parse
    need not parse merged (one removes a `try`'s `except`, the other its `finally`)."""

    def __init__(self, version: int, why: str) -> None:
        super().__init__(f"another writer moved dev to version {version}, and the change carried onto it: {why}")


def commit(
    ledger: Ledger, artifact_id: str, head: int, head_state: State, acceptance: Acceptance,
    step: int, policies: StepPolicies, unreadable: Callable[[Sequence[Edit]], str | None], retries: int = 3,
) -> int:
    """Compare-and-swap the candidate onto `dev`. If another writer moved `dev`, carry the change
    onto the new head (merged three-way, or stacked after its lines where both only insert),
    checked as the step checks a merge (`unreadable`, the governance's syntax check), and retry;
    raise `HeadMoved` when it no longer applies, `CarriedUnreadable` when the carried change would
    leave a file unreadable, and `AlreadyLanded` when the new head holds it already (an empty
    commit would claim a change no one made)."""
    subject, trailers = commit_message(step, acceptance)
    candidate, base, base_state = acceptance.candidate, head, head_state
    for _ in range(retries):
        try:
            return ledger.commit(artifact_id, candidate, expected_version=base, message=subject, trailers=trailers)
        except HeadMoved as moved:
            new_base = ledger.head()
            new_state = ledger.snapshot(artifact_id, new_base)
            carried = _carry(base_state, candidate, new_state, policies)
            if carried is None:
                raise moved
            if carried == new_state:
                raise AlreadyLanded(new_base) from None
            broken = unreadable([Edit(key=k, before=new_state.get(k), after=carried.get(k)) for k in set(carried) | set(new_state)
                                 if carried.get(k) != new_state.get(k)])
            if broken:
                raise CarriedUnreadable(new_base, broken) from None
            candidate, base, base_state = carried, new_base, new_state
    raise HeadMoved(base, ledger.head())


def _carry(old: State, ours: State, theirs: State, policies: StepPolicies) -> State | None:
    after: dict[str, str | None] = {}
    for key in set(old) | set(ours):
        if old.get(key) == ours.get(key):
            continue
        merged = onto(policies, old.get(key), ours.get(key), theirs.get(key))
        if merged is False:
            return None
        after[key] = merged
    return apply(theirs, after)
