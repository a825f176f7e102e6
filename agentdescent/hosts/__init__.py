"""The host bundles and their wiring: Claude Code (a plugin and its marketplace), Codex (a block in
its config.toml and the skill) and DeepSeek Harness (a row in cordis.patch.yml and the skill).

`HOSTS` is the one table of hosts: each name, as `agentdescent install NAME` takes it, and the
module that wires it, which meets the `Host` protocol (`base`); `module(name)` imports it.
`bundle` holds the files the bundles ship and keeps their copies in step. Adding a host is one
module and one row here.
"""

from __future__ import annotations

import importlib

from agentdescent.errors import UserError
from agentdescent.hosts.base import Changed, Host, HostReport

HOSTS: dict[str, str] = {
    "claude-code": "agentdescent.hosts.claude_code",
    "codex": "agentdescent.hosts.codex",
    "deepseek": "agentdescent.hosts.deepseek",
}

__all__ = ["HOSTS", "Changed", "Host", "HostReport", "module"]


def module(host: str) -> Host:
    """The module that wires `host` (a name of `HOSTS`), imported now."""
    if host not in HOSTS:
        raise UserError(f"unknown host {host!r}; choose one of {', '.join(HOSTS)}")
    found = importlib.import_module(HOSTS[host])
    if not isinstance(found, Host):
        raise TypeError(f"{HOSTS[host]} does not meet the Host protocol (agentdescent.hosts.base.Host)")
    return found
