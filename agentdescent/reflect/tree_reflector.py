"""Reflection for a folder: a model proposes whole-file edits of a `FileTree`, checked before use.

    tree_reflector(model, strategy=tree)   file blocks in, validated against the strategy

A reply is checked at the door before it is read (at most `MAX_TREE_PROPOSAL_CHARS` characters,
valid Unicode, no NUL), then read by the linear `parse_file_blocks`. A file whose text holds
`</file>` is shown in a `<file-N>` block (`fileblocks.file_block`), and the prompt asks for it
back so; a reply that would cut a file short or stops inside a block is refused (`fileblocks.misread`).
What it leaves out: reading the folder from disk and running an agent in it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from agentdescent.agents.base import Model
from agentdescent.artifacts.fileblocks import file_block, files_of, free_tag, misread, parse_file_blocks
from agentdescent.artifacts.strategies import MAX_TREE_PROPOSAL_CHARS, FileTree, InvalidProposal
from agentdescent.governance import Governance
from agentdescent.governance.text import NUL_ONLY, text_refusal
from agentdescent.reflect.reflector import NONE_REPLY, Reflector, describe_cases, describe_tried, fenced, unwrap
from agentdescent.reflect.templates import template
from agentdescent.returned import plain_callable
from agentdescent.types import Edit, Task, Tried

TRIED_CHARS = 300  # of a refused change's file blocks, quoted to the next reflection
# What a model writes for lines it left out, once comment marks and brackets are stripped: "...",
# "rest of the file unchanged", "existing content", "remaining sections as before", ...
_ELISION = re.compile(r"(?:\.\.\.|…)|(?:(?:\.\.\.|…)\s*)?(?:the\s+)?(?:rest|remainder|remaining|existing|other|unchanged)\b"
                      r"[\w\s]{0,40}?\b(?:unchanged|as before|the same|omitted|here|content|code|text|sections?|lines?)"
                      r"(?:\s*(?:\.\.\.|…))?\.?")


class TreeReflector(Reflector):
    """A `propose` for a `FileTree`: file blocks in, validated against the strategy."""

    made_by = "tree_reflector()"

    def __init__(self, model: Model, strategy: FileTree, *, batch: bool = False, instructions: str | None = None,
                 apart: bool = False) -> None:
        super().__init__(model, batch=batch, instructions=instructions or template("tree_reflect"), apart=apart)
        self.strategy = strategy

    def _ask(self, rendered: object, cases: Sequence[tuple[Task, str, float]], tried: Sequence[Tried] = ()) -> str | None:
        files = dict(rendered) if isinstance(rendered, Mapping) else {}
        rules = Governance.of(self.strategy)
        editable = rules.changeable(sorted(files))
        reply = self._asked(
            "files", format_files(files), marked=_marked(files), editable=", ".join(editable) or "(none)",
            frozen=", ".join(p for p in sorted(files) if p not in editable) or "(none)",
            max_files=str(self.strategy.max_keys_per_diff or "any number of"), cases=describe_cases(cases),
            tried=describe_tried(tried, chars=TRIED_CHARS),
        )
        try:
            _check_reply(reply)
            if NONE_REPLY.match(unwrap(reply)):
                self._count("none")
                return None
            proposal = self.validate(reply, files)
        except InvalidProposal:
            self._count("invalid")
            raise
        self._count("edits")
        return proposal

    def validate(self, reply: str, current: Mapping[str, str] | None = None) -> str:
        """The file blocks of `reply`, re-emitted cleanly with each path as the key of a file of
        `current` (the folder as the model saw it) it names (`files_of`), or InvalidProposal
        saying what is wrong: a file whose text leaves part of its current text out ("rest
        unchanged") is refused, since written back it would lose that part."""
        _check_reply(reply)
        current = current or {}
        misreading = misread(reply, current)
        if misreading:
            raise InvalidProposal(misreading)
        files = {path: _unfence(text, current.get(path)) if text is not None else None
                 for path, text in files_of(reply, current).items()}
        if not files:
            raise InvalidProposal('the reply holds no <file path="..."> or <delete path="..."/> block')
        elided = next(((p, line) for p, t in files.items() if t is not None and p in current
                       for line in [_elision(t, current[p])] if line), None)
        if elided:
            raise InvalidProposal(f"the reply leaves part of {elided[0]} out ({elided[1][:60]!r}): give each changed "
                                  "file whole, every line it keeps included")
        rules = Governance.of(self.strategy)  # the checks admission makes, so a bad reply fails here, with its reason
        reason = (rules.invalidity([Edit(key=p, before=current.get(p), after=t) for p, t in files.items()])
                  or rules.refusal(files.keys()))
        if reason:
            raise InvalidProposal(reason)
        proposal = "\n".join(f'<delete path="{p}"/>' if t is None else file_block(p, t) for p, t in files.items())
        if parse_file_blocks(proposal) != files:  # what was checked must be what the strategy reads back
            raise InvalidProposal("the checked files do not read back from the proposal made of them")
        return proposal


def tree_reflector(model: Model, *, strategy: FileTree, batch: bool = False, instructions: str | None = None,
                   apart: bool = False) -> TreeReflector:
    """A `propose` that asks `model` for whole-file edits of a `FileTree` artifact. A reply that
    edits a frozen file, more files than `max_files_per_diff`, or a path outside the folder, or that
    leaves a file unreadable that parsed (`governance.syntax`), raises `InvalidProposal` (an
    `invalid` outcome, with the reason). `apart` as for `reflector`."""
    plain_callable(model, "tree_reflector's model")
    return TreeReflector(model, strategy, batch=batch, instructions=instructions, apart=apart)


def _elision(text: str, before: str) -> str | None:
    """A line of `text` that stands for lines left out ("...", "[rest of the file unchanged]",
    "<!-- existing content -->") and that `before` does not hold; None when there is none."""
    had = {line.strip() for line in before.splitlines()}
    return next((line.strip() for line in text.splitlines() if line.strip() not in had
                 and _ELISION.fullmatch(line.strip().strip("#/*<>!-()[]{}` ").lower())), None)


def format_files(files: Mapping[str, str]) -> str:
    """The files as blocks that read back as their texts (`fileblocks.file_block`)."""
    return "\n".join(file_block(path, text) for path, text in sorted(files.items()))


def _marked(files: Mapping[str, str]) -> str:
    """For the prompt, how to give back each file shown in a `<file-N>` block ("" for none)."""
    return "".join(f'\n{path} holds </file> in its text, so it is shown between <{tag} path="{path}"> and </{tag}>: '
                   f"give it back the same way, ended by </{tag}>."
                   for path, text in sorted(files.items()) if (tag := free_tag("file", text)) != "file")


def _check_reply(reply: str) -> None:
    """InvalidProposal, with the reason, for a reply that must not be parsed."""
    refused = text_refusal(reply, cap=MAX_TREE_PROPOSAL_CHARS, controls=NUL_ONLY, what="reply")
    if refused:
        raise InvalidProposal(refused)


def _unfence(text: str, before: str | None = None) -> str:
    """File content a model wrapped in a code fence, unwrapped (unless the file, `before`, is itself
    one fenced block); a newline at the end kept."""
    body = fenced(text.strip()) if before is None or fenced(before.strip()) is None else None
    body = text if body is None else body
    return body if body.endswith("\n") or not body else body + "\n"
