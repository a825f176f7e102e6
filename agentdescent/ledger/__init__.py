"""The git ledger: one real repository per run, one commit per optimizer step, `dev` and `stable`."""

from agentdescent.ledger.ledger import CommitRecord, Ledger, in_use, looks_like_ledger

__all__ = ["CommitRecord", "Ledger", "in_use", "looks_like_ledger"]
