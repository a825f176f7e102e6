"""A playbook's page: the text its rules are kept in (a prompt file, or a header), which every
rendering gives back byte for byte but where a run changed a rule.

The page's own bullets ("- rule", "* rule" or "+ rule" at a line's start, outside a fenced code
block) are its first rules: a run may remove or reword them, and proposing one again is a
duplicate. A rendering keeps the line of each rule still held as the page has it, leaves out the
lines of rules removed, and inserts the rules a run added after the page's last bullet (after its
last line of text where it has none), a "- rule" line each, ended with the line break of the line
before them (`textform.inserted`): the page's blank lines and the blanks its lines end with (a
Markdown hard break) stay, and so does its last line break, or the lack of one.

    Page("Rules:  \\n- Be brief.\\n\\n").rules == ["Be brief."]
    Page("Rules:  \\n\\n").render({"k": "Be brief."}) == "Rules:  \\n- Be brief.\\n\\n"
    Page("Rules:").render({"k": "Be brief."}) == "Rules:\\n- Be brief."

Left out: a reworded rule's place (it is a rule removed and one added, so it goes with the added
ones), numbered lists and indented bullets (text, not rules), and the indented lines that carry a
bullet on (text of the page, kept when its rule is removed; added rules go below them).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from agentdescent.artifacts.textform import final_break, inserted, lines_of, text_end

_BULLET = re.compile(r"([-*+][ \t]+)(.*?)\s*", re.DOTALL)  # its marker, its rule; the blanks after it aside
_FENCE = re.compile(r"[ \t]*(```|~~~)")


def rule_key(rule: str) -> str:
    """The key of a rule: its normalised content hash. rule_key("Be brief.") == rule_key("be  brief")"""
    normal = " ".join(re.sub(r"[^\w\s]", " ", rule.lower()).split())
    return "rule-" + hashlib.sha256(normal.encode("utf-8")).hexdigest()[:10]


def holds_rule(text: str, rule: str) -> bool:
    """Whether a line of `text` says `rule` but for case, punctuation and blanks (`rule_key`: so a
    line of no words, "---", says what any other does, "***").
    holds_rule("Be kind.\\n- be brief!\\n", "Be brief.") is True"""
    key = rule_key(rule)
    return any(line.strip() and rule_key(line) == key for line in lines_of(text))


class Page:
    """The text a playbook's rules are kept in, its own rules, and a state of rules rendered in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = lines_of(text)
        self.bullets = dict(_bullets(self.lines))  # a bullet line's index -> its rule
        self.rules = list(dict.fromkeys(self.bullets.values()))
        self.first: dict[str, str] = {}  # a rule's key -> the page's first rule of that key
        for rule in self.rules:
            self.first.setdefault(rule_key(rule), rule)
        self.at = _after_list(self.lines, max(self.bullets)) if self.bullets else text_end(self.lines)

    def render(self, state: Mapping[str, str]) -> str:
        """The page with its rules as `state` holds them, and a "- rule" line for each rule of
        `state` that is not the page's own, in the order of their keys."""
        kept = [(at, line) for at, line in enumerate(self.lines) if at not in self.bullets or self._held(at, state)]
        lines = [self._line(at, line, state) for at, line in kept]
        added = [f"- {state[key]}" for key in sorted(state) if key not in self.first]
        text = "".join(inserted(lines, sum(at < self.at for at, _ in kept), added))
        return text if final_break(self.text) else text.removesuffix(final_break(text))

    def _held(self, at: int, state: Mapping[str, str]) -> bool:
        return rule_key(self.bullets[at]) in state

    def _line(self, at: int, line: str, state: Mapping[str, str]) -> str:
        """A line of the page as it is, or a bullet whose rule `state` words otherwise, so worded."""
        if at not in self.bullets:
            return line
        key = rule_key(self.bullets[at])
        if state[key] == self.first[key]:
            return line
        marker = _BULLET.fullmatch(line.rstrip("\r\n"))
        return f"{marker.group(1) if marker else '- '}{state[key]}{final_break(line)}"


def _bullets(lines: list[str]) -> list[tuple[int, str]]:
    """The lines of `lines` that are bullets (outside fenced code), by index, with their rules."""
    found, fenced = [], False
    for at, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        bullet = None if fenced else _BULLET.fullmatch(line)
        if bullet and bullet.group(2) and set(bullet.group(2)) - set("-*+ \t"):  # "- - -" is a thematic break
            found.append((at, bullet.group(2)))
    return found


def _after_list(lines: list[str], last: int) -> int:
    """The index after the bullet `lines[last]` and the indented lines that carry it on."""
    at = last + 1
    while at < len(lines) and lines[at][:1] in (" ", "\t") and lines[at].strip():
        at += 1
    return at
