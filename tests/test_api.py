"""The public names are a promise: this pins them, and the import paths the README is written against."""

import importlib
import inspect
import os
import subprocess
import sys

import pytest

import agentdescent


def test_public_names_are_pinned():
    assert sorted(agentdescent.__all__) == [
        "AgentDescentError", "AgentError", "Amortized", "AppendRules", "BadReply", "BetaAcceptance", "BetterEvidence",
        "Budget", "BudgetSpent", "CancelToken", "Cancelled", "Diff", "Edit", "Epochs", "EvidenceCard", "EvolveResult",
        "FailuresFirst", "FileTree", "HeadMoved", "InvalidProposal", "KeyedRules", "Killed", "Ledger", "LedgerError",
        "OnHeldOutGain", "Outcome", "OutputTooLarge", "Parallelism", "Patience", "PipelineParallel", "Policies",
        "RandomMinibatches", "Settings", "SingleSlot", "Staleness", "StopRule", "Stopping", "Strategy", "TargetReward", "Task",
        "TensorParallel", "ThreeWayMerge", "TimedOut", "Tried", "UserError", "WorstFirst", "claude", "claude_code", "codex",
        "deepseek", "evolve", "llm_fusion", "llm_judge", "load_tree", "openai_compatible", "reflector", "scorer",
        "scripted", "tasks_from", "tree_reflector", "tree_runner",
    ]


def test_every_public_name_is_ours_and_documented():
    for name in agentdescent.__all__:
        thing = getattr(agentdescent, name)
        assert thing.__module__.startswith("agentdescent."), f"{name} comes from {thing.__module__}"
        assert inspect.getdoc(thing), f"{name} has no docstring"


def test_the_stable_import_paths_reach_the_same_objects():
    """`agentdescent`, `agentdescent.agents`, `agentdescent.dataloader` and `agentdescent.governance`
    stay where users import them from, whatever moves inside the package."""
    stable = {
        "agentdescent.agents": ["claude", "claude_code", "codex", "deepseek", "openai_compatible", "scripted"],
        "agentdescent.dataloader": ["tasks_from", "hf_rows", "jsonl_rows", "csv_rows", "json_rows"],
        "agentdescent.governance": ["SKILL_BLAST_RADIUS", "HARNESS_BLAST_RADIUS"],
    }
    for module_name, names in stable.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert hasattr(module, name), f"{module_name}.{name} is gone"
            if name in agentdescent.__all__:
                assert getattr(module, name) is getattr(agentdescent, name)


def test_user_error_is_a_value_error_with_the_fix_in_it():
    assert issubclass(agentdescent.UserError, ValueError)
    assert issubclass(agentdescent.HeadMoved, agentdescent.LedgerError)
    moved = agentdescent.HeadMoved(3, 5)
    assert (moved.expected, moved.actual) == (3, 5) and "rebase and retry" in str(moved)


def test_the_lazy_tables_and_the_imports_read_by_tools_agree():
    """A package that imports its names when first used (`agentdescent._exports`) also imports
    them under TYPE_CHECKING for type checkers and the API reference: the two lists are one."""
    import ast

    lazy = ("agentdescent", "agentdescent.agents", "agentdescent.artifacts", "agentdescent.dataloader", "agentdescent.runs",
            "agentdescent.step")
    for package in map(importlib.import_module, lazy):
        tree = ast.parse(inspect.getsource(package))
        block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
        read = {alias.name: node.module for node in block.body for alias in node.names}
        assert read == package._WHERE, package.__name__
        for name, module in read.items():
            assert getattr(package, name) is getattr(importlib.import_module(module), name)


def test_importing_the_package_or_a_unit_of_work_does_not_import_the_clients_or_git():
    """A Ray actor or a process worker unpickles `roll_out` (and, in the docs and benchmarks, the demo
    domain's `route`) and needs no HTTP client nor GitPython; `import agentdescent` needs nothing
    at all until a name is used."""
    probe = ("import sys, {module}; "
             "print(sorted(m for m in ('httpx', 'git', 'agentdescent.engine.evolve', 'agentdescent.ledger') if m in sys.modules))")
    for module in ("agentdescent", "agentdescent.engine.calls.units", "agentdescent.testing"):
        out = subprocess.run([sys.executable, "-c", probe.format(module=module)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]", (module, out.stdout, out.stderr)


# What the CLI and the MCP server need only once a verb or a tool does the work it is for.
NOT_AT_START = ("scipy", "numpy", "httpx", "git", "yaml", "ray", "agentdescent.engine.evolve", "agentdescent.ledger.ledger")
LISTED = f"import sys; print(sorted(m for m in {NOT_AT_START!r} if m in sys.modules))"


@pytest.mark.parametrize("probe", [
    "from agentdescent.cli.main import main; assert main(['runs']) == 0",
    "import anyio; from agentdescent_mcp.server import server; assert anyio.run(server.list_tools)",
], ids=["cli runs", "mcp tools/list"])
def test_the_cli_and_the_mcp_server_start_without_what_only_some_verbs_need(probe, tmp_path):
    """A host starts the MCP server and waits for its tools list; every CLI verb pays the CLI's
    imports: neither imports the engine, GitPython, PyYAML or the statistics to answer `runs` or
    `tools/list` (each is imported where it is used)."""
    env = {**os.environ, "AGENTDESCENT_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", f"{probe}; {LISTED}"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[]", out.stdout[-2000:]
