"""Where a folder target lies in each rollout's workspace: its layout (`artifacts.workspace.LAYOUTS`),
by its kind and the agent that reads it, and in a skill's layout the skill's folder name: the
spec's `name:`, else its SKILL.md's `name:` where that is a valid one, else the target folder's.

`name_problem` says, for `plan`, when that name cannot be a folder's (a folder named `my:skill`,
`con` or `skill.`), with the spec's fix, rather than let the run fail as it starts.

Left out: laying the files out (`artifacts.workspace`), and what else a target must be (`build`).
"""

from __future__ import annotations

import re
from pathlib import Path

from agentdescent.artifacts.workspace import LAYOUTS, skill_name
from agentdescent.governance import unsafe_key_reason
from agentdescent.runs.spec import RunSpec

LAYOUT_OF_KIND = {"skill_dir": "claude_skill", "agent_dir": "claude_agents", "plugin": "plugin"}
LAYOUT_OF_AGENT = {("skill_dir", "codex"): "agents_skill"}  # where that agent looks, where it differs from the kind's


def layout_of(spec: RunSpec, kind: str) -> str:
    """The spec's layout, or where the agent it names looks for a target of `kind`."""
    return spec.layout or LAYOUT_OF_AGENT.get((kind, spec.agent.kind), LAYOUT_OF_KIND[kind])


def name_of(spec: RunSpec, tree: dict[str, str]) -> str:
    """The skill's folder name in a rollout: name_of(<no name:, a SKILL.md naming support-router>, ...) == "support-router" """
    return spec.name or skill_name(tree.get("SKILL.md"), Path(spec.target).name)


def name_problem(spec: RunSpec, kind: str, tree: dict[str, str]) -> str | None:
    """Why the skill's folder in a rollout cannot bear the name it would get, with the fix; None
    when it can, or when the layout names no folder after the skill."""
    name = name_of(spec, tree)
    if "{name}" not in LAYOUTS[layout_of(spec, kind)] or not (reason := unsafe_key_reason(name)):
        return None
    suggested = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:58]
    suggested = suggested if suggested and not unsafe_key_reason(suggested) else f"{suggested or 'my'}-skill"
    return (f"the skill's folder in each rollout would be named {name!r}, the target folder's name (its SKILL.md's "
            f"name: is missing or not a valid skill name), and {reason.removeprefix(f'key {name!r} ')}: "
            f"set name: in the spec (lowercase letters, digits and hyphens), e.g. name: {suggested}")
