"""The prompt templates that ship beside the code (`agentdescent/prompts/*.txt`), loaded once."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def template(name: str) -> str:
    """The text of `prompts/<name>.txt`. template("reflect") starts "You are improving..." """
    return resources.files("agentdescent.reflect").joinpath(f"prompts/{name}.txt").read_text(encoding="utf-8")


def fill(text: str, **fields: object) -> str:
    """str.format for templates whose fields may hold braces: fill("<{a}>", a="{x}") == "<{x}>"."""
    return text.format_map({k: str(v) for k, v in fields.items()})
