"""The git ledger: one real repository per run, one commit per optimizer step, `dev` and `stable`."""

from agentdescent.ledger.ledger import CommitRecord, Ledger

__all__ = ["CommitRecord", "Ledger"]
