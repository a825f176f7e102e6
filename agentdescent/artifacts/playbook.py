"""A playbook's page: the text its rules are kept in (a prompt file, or a header), which every
rendering gives back byte for byte but where a run changed a rule.

The rules a run adds go after the page's last line of text, a "- rule" line each, ended with the
line break of the line before them (`textform.inserted`): the page's blank lines and the blanks
its lines end with (a Markdown hard break) stay as they were, and so does its last line break, or
the lack of one. A run that adds nothing renders the page itself.

    Page("Rules:  \\n\\n").render({"k": "Be brief."}) == "Rules:  \\n- Be brief.\\n\\n"
    Page("Rules:").render({"k": "Be brief."}) == "Rules:\\n- Be brief."

Left out: where the page's own text stands (it is all kept, never judged).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from agentdescent.artifacts.textform import final_break, inserted, lines_of, text_end


def rule_key(rule: str) -> str:
    """The key of a rule: its normalised content hash. rule_key("Be brief.") == rule_key("be  brief")"""
    normal = " ".join(re.sub(r"[^\w\s]", " ", rule.lower()).split())
    return "rule-" + hashlib.sha256(normal.encode("utf-8")).hexdigest()[:10]


class Page:
    """The text a playbook's rules are kept in, and the rendering of a state of rules in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = lines_of(text)
        self.at = text_end(self.lines)

    def render(self, state: Mapping[str, str]) -> str:
        """The page with a "- rule" line for each rule of `state`, in the order of their keys."""
        added = inserted(self.lines, self.at, [f"- {state[key]}" for key in sorted(state)])
        text = "".join(added)
        return text if final_break(self.text) else text.removesuffix(final_break(text))
