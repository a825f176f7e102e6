"""The host bundles: where their files come from, and the copies that must never drift.

Sources, in the repository (the only files a person edits):

    skills/agentdescent/SKILL.md           the skill: its one text
    plugins/claude-code/, codex/, deepseek/ each host's bundle, but for its copy of the skill
    .claude-plugin/marketplace.json         the marketplace a Claude Code user adds

Copies, written by `python -m agentdescent.hosts.bundle` and checked by `drift()` (a test fails on
any difference): each bundle's copy of the skill, at the path its host reads (its module's
`SKILL`), and `agentdescent/hosts/bundle.json`, every bundle file as package data, so that a user
who installed the package from PyPI and never cloned the repository has them (`files(host)`).
One JSON file rather than a folder, because the bundles hold dot-files (`.mcp.json`,
`.claude-plugin/`) that package-data globs leave out. Left out: writing them into a host's configuration (the host modules).
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

from agentdescent import atomic
from agentdescent.hosts import HOSTS, module

SKILL_SOURCE = "skills/agentdescent/SKILL.md"
MARKETPLACE = ".claude-plugin/marketplace.json"
PACKAGED = Path(__file__).with_name("bundle.json")


def files(host: str) -> dict[str, str]:
    """{relative path: text} of a host's bundle as the package ships it ("marketplace": the
    marketplace file, laid out to sit beside `plugins/claude-code/`)."""
    data = json.loads(resources.files("agentdescent.hosts").joinpath("bundle.json").read_text(encoding="utf-8"))
    return dict(data[host])


def skill_copy(host: str) -> str:
    """Where `host`'s bundle holds its copy of the skill, relative to the bundle: its module's `SKILL`."""
    return module(host).SKILL


def expected(repo: Path) -> dict[Path, str]:
    """Every copy, by path under `repo`, with the text it must hold."""
    skill = (repo / SKILL_SOURCE).read_text(encoding="utf-8")
    bundles: dict[str, dict[str, str]] = {}
    for host in HOSTS:
        folder = repo / "plugins" / host
        found = {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
                 for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
        bundles[host] = {**found, skill_copy(host): skill}
    bundles["marketplace"] = {MARKETPLACE: (repo / MARKETPLACE).read_text(encoding="utf-8")}
    copies = {repo / "plugins" / host / skill_copy(host): skill for host in HOSTS}
    copies[repo / "agentdescent" / "hosts" / "bundle.json"] = json.dumps(bundles, indent=1, sort_keys=True) + "\n"
    return copies


def drift(repo: Path) -> list[str]:
    """The copies under `repo` that differ from their sources (relative paths); empty when in step."""
    return [path.relative_to(repo).as_posix() for path, text in expected(repo).items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text]


def sync(repo: Path) -> list[str]:
    """Write every copy that differs; the relative paths written."""
    changed = drift(repo)
    for path, text in expected(repo).items():
        if path.relative_to(repo).as_posix() in changed:
            atomic.write_text(path, text)
    return changed


if __name__ == "__main__":  # python -m agentdescent.hosts.bundle [REPO]: bring the copies in step
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    written = sync(root)
    print("\n".join(f"wrote {p}" for p in written) or "every copy is in step with its source")
