"""The public names are a promise: this pins them."""

import agentdescent


def test_public_names_are_pinned():
    assert sorted(agentdescent.__all__) == [
        "AgentDescentError", "AgentError", "AppendRules", "Diff", "Edit", "EvidenceCard", "EvolveResult",
        "FileTree", "HeadMoved", "KeyedRules", "Ledger", "LedgerError", "Outcome", "Policies", "SingleSlot",
        "Strategy", "Task", "UserError", "claude", "claude_code", "codex", "deepseek", "evolve", "llm_fusion",
        "llm_judge", "openai_compatible", "reflector", "scorer", "scripted", "tasks_from", "tree_reflector",
    ]
    for name in agentdescent.__all__:
        assert getattr(agentdescent, name) is not None


def test_user_error_is_a_value_error_with_the_fix_in_it():
    assert issubclass(agentdescent.UserError, ValueError)
    assert issubclass(agentdescent.HeadMoved, agentdescent.LedgerError)
    moved = agentdescent.HeadMoved(3, 5)
    assert (moved.expected, moved.actual) == (3, 5) and "rebase and retry" in str(moved)
