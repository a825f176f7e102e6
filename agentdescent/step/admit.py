"""Admit: the first stage of the optimizer step. Schema, size, path safety, syntax, then governance."""

from __future__ import annotations

from agentdescent.governance import Governance
from agentdescent.types import Diff, OutcomeKind


def admit(diff: Diff, artifact_id: str, governance: Governance) -> tuple[OutcomeKind, str] | None:
    """Schema, size, path safety, syntax (`governance.syntax`), then governance. None admits the diff."""
    if diff.artifact_id != artifact_id:
        return "invalid", f"diff is for artifact {diff.artifact_id!r}, this step is for {artifact_id!r}"
    invalid = governance.invalidity(diff.edits)
    if invalid:
        return "invalid", invalid
    refused = governance.refusal(diff.keys) or governance.capability_refusal(diff.edits)
    return ("refused_by_governance", refused) if refused else None
