"""The host bundles and their wiring: Claude Code (a plugin and its marketplace), Codex (a block in
its config.toml and the skill) and DeepSeek Harness (a row in cordis.patch.yml and the skill).

`module(host)` is the host's module (`report`, `install`, `uninstall`; see `base`); `bundle` holds
the files the bundles ship and keeps their copies in step.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from agentdescent.errors import UserError
from agentdescent.hosts.base import Changed, HostReport

HOSTS = {"claude-code": "claude_code", "codex": "codex", "deepseek": "deepseek"}

__all__ = ["HOSTS", "Changed", "HostReport", "module"]


def module(host: str) -> ModuleType:
    """The module that wires `host` (claude-code, codex or deepseek)."""
    if host not in HOSTS:
        raise UserError(f"unknown host {host!r}; choose one of {', '.join(HOSTS)}")
    return importlib.import_module(f"agentdescent.hosts.{HOSTS[host]}")
