"""The git ledger: one real repository per run, one commit per optimizer step, `dev` and `stable`."""

from agentdescent.ledger.ledger import CommitRecord, Ledger, looks_like_ledger

__all__ = ["CommitRecord", "Ledger", "looks_like_ledger"]
