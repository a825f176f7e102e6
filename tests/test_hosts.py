"""The table of hosts is the one list of hosts: every row is a module that meets the Host protocol,
its bundle is in plugins/ under its name, and the hosts stay below the run service."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agentdescent.errors import UserError
from agentdescent.hosts import HOSTS, Host, bundle, module

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", list(HOSTS))
def test_every_row_is_a_host_module_named_as_its_row(name):
    host = module(name)
    assert isinstance(host, Host) and host.HOST == name
    assert (ROOT / "plugins" / name).is_dir(), f"the bundle of {name} is plugins/{name}/"
    assert (ROOT / "plugins" / name / host.SKILL).is_file() and bundle.skill_copy(name) == host.SKILL


def test_an_unknown_host_is_a_user_error_naming_the_hosts():
    with pytest.raises(UserError, match="choose one of claude-code, codex, deepseek"):
        module("vscode")


def test_a_host_module_imports_nothing_of_the_run_service():
    """hosts/ sits below runs/ (the service and the doctor call the hosts, never the other way)."""
    for path in sorted((ROOT / "agentdescent" / "hosts").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert not {m for m in imported if m.startswith("agentdescent.runs")}, path.name
