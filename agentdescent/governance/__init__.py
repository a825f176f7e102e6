"""Governance: which keys a diff may touch (`layers`: L0 frozen, L1 gated, L2 free) and which keys
may become files at all (`paths`). It is the L0 layer's own code: nothing a diff holds reaches it."""

from agentdescent.governance.layers import (
    BLAST_RADII,
    HARNESS_BLAST_RADIUS,
    PLUGIN_BLAST_RADIUS,
    SKILL_BLAST_RADIUS,
    Governance,
    Layer,
    is_frozen,
    matching,
    not_layers,
)
from agentdescent.governance.paths import clashes, fold, unsafe_key_reason
from agentdescent.governance.text import MAX_FILE_BYTES

__all__ = [
    "BLAST_RADII",
    "HARNESS_BLAST_RADIUS",
    "MAX_FILE_BYTES",
    "PLUGIN_BLAST_RADIUS",
    "SKILL_BLAST_RADIUS",
    "Governance",
    "Layer",
    "clashes",
    "fold",
    "is_frozen",
    "matching",
    "not_layers",
    "unsafe_key_reason",
]
