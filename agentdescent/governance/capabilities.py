"""What a skill, subagent or command may run or connect to, as its own text says: the capability
fields of a Markdown file's frontmatter (`hooks`, `mcpServers`, `allowed-tools`, `tools`,
`disallowedTools`, `permissionMode`, `shell`) and the shell commands it runs when loaded
(`` !`cmd` ``). Claude Code acts on both as a file is loaded, so a change to them would run or
widen on this machine at the next rollout, before anyone judged it; with layered governance no
diff makes one (`refusal`), as no diff touches a hook.

    refusal([Edit(key="SKILL.md", before="---\\nname: s\\n---\\nRoute.", after="---\\nname: s\\n"
             "allowed-tools: Bash\\n---\\nRoute.")])  ==  "changes what SKILL.md may run or ..."

A frontmatter is read by its lines, not parsed (a diff that breaks its YAML must not hide a
field): a field is its top-level line and the indented lines under it. Left out: `.md` files a
host never loads as a skill, agent or command (they are refused alike: cheaper than telling them
apart), and what a command run by an allowed tool may do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentdescent.types import Edit

__all__ = ["CAPABILITY_FIELDS", "OTHERWISE", "frontmatter_fields", "refusal"]

CAPABILITY_FIELDS = ("hooks", "mcpservers", "allowed-tools", "allowedtools", "tools", "disallowedtools",
                     "disallowed-tools", "permissionmode", "shell")  # compared lowercased
OTHERWISE = "fields written another way"  # what `frontmatter_fields` files lines it cannot tell apart under
_FIELD = re.compile(r"""["']?([A-Za-z_][\w-]*)["']?\s*:""")  # a top-level key, quoted or not
_NAMED = re.compile(r"(?<![\w-])(" + "|".join(CAPABILITY_FIELDS).replace("-", "[-_]?") + r")(?![\w-])", re.IGNORECASE)
_INLINE_SHELL = re.compile(r"!`[^`\n]*`|^```!.*$", re.MULTILINE)  # a command the host runs as it loads the file


def refusal(edits: Sequence[Edit]) -> str | None:
    """Why no diff may make `edits`: one changes a Markdown file's capability fields or adds a
    shell command it runs when loaded; None when none does."""
    for edit in edits:
        if not edit.key.lower().endswith(".md"):
            continue
        before, after = edit.before or "", edit.after or ""
        had, has = frontmatter_fields(before), frontmatter_fields(after)
        fields = sorted(name for name in had.keys() | has.keys() if had.get(name) != has.get(name))
        added = sorted(set(_INLINE_SHELL.findall(after)) - set(_INLINE_SHELL.findall(before)))
        if fields or added:
            what = (f"its frontmatter's {', '.join(fields)}" if fields else "") + (
                " and " if fields and added else "") + ("a shell command it runs when loaded" if added else "")
            return (f"changes what {edit.key} may run or connect to ({what}): a host acts on it as the file loads, "
                    "so no diff changes it; change it by hand if you mean to")
    return None


def frontmatter_fields(text: str) -> dict[str, list[str]]:
    """The capability fields of `text`'s frontmatter, each with its lines (its own and those indented under it)."""
    lines = text.removeprefix("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    found: dict[str, list[str]] = {}
    current = None
    for line in lines[1:]:
        if line.strip() == "---":
            break
        if line[:1].isspace() or not line.strip():  # under the field above
            if current is not None:
                found.setdefault(current, []).append(line.rstrip())
            continue
        top = _FIELD.match(line)
        name = top.group(1).lower() if top else None
        current = name if name in CAPABILITY_FIELDS else None
        if current is not None:
            found.setdefault(current, []).append(line.rstrip())
        elif top is None and (_NAMED.search(line) or line.startswith("<<")):  # flow style, a complex key, a merge
            current = OTHERWISE
            found.setdefault(current, []).append(line.rstrip())
    return found
