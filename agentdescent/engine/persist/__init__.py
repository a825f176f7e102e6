"""Persistence: what a run keeps beside its ledger (checkpoint, journals, start log) so that a
killed run resumes, never pays twice, and its bill can be read back. Nothing is imported here.
"""
