"""Where a folder target lies in each rollout's workspace: its layout (`artifacts.workspace.LAYOUTS`),
by its kind and the agent that reads it, and in a skill's layout the skill's folder name: the
spec's `name:`, else its SKILL.md's `name:` where that is a valid one, else the target folder's.

`name_problem` says, for `plan`, when that name cannot be a folder's (a folder named `my:skill`,
`con` or `skill.`), with the spec's fix, rather than let the run fail as it starts. `layout_warnings`
says when a folder holds a project's instructions (`AGENTS.md`, `CLAUDE.md` at its top) yet would be
laid under `.claude/agents/`, the default for a folder of subagent definitions, where no host reads
them as the project's; `root` is not made that default, since a project's own hooks and servers run
at a workspace's root (`rootconfig`), so the user sets it, as `init` does.

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
PROJECT_FILES = ("AGENTS.md", "CLAUDE.md")  # what Codex and Claude Code read at the top of the folder they work in


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


def layout_warnings(spec: RunSpec, kind: str, tree: dict[str, str] | None) -> list[str]:
    """A folder with a project's instructions at its top that the default layout would lay under
    `.claude/agents/`, with the spec's fix; [] for any other folder, or a layout the spec gives."""
    found = [name for name in PROJECT_FILES if tree is not None and name in tree]
    if spec.layout is not None or not found or layout_of(spec, kind) != "claude_agents":
        return []
    return [f"the folder holds {' and '.join(found)} at its top, as a project does, yet each rollout lays it under "
            ".claude/agents/ (the default for subagent definitions), where no agent reads "
            f"{'them' if len(found) > 1 else 'it'} as the project's: set layout: root to run the agent in a copy of the "
            "folder (plan then names the hooks and servers that would run there)"]
