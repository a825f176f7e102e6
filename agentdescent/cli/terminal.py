"""The console every verb prints through: keys redacted (`RedactingStream`), and the control
characters of what it prints shown, never sent.

What a command prints quotes models and files (a diff, a reply in an error, a rule a reflector
wrote), and a terminal acts on the escape sequences such text may hold: clearing the screen,
retitling the window, writing the clipboard (OSC 52). Rich sends ESC as it is, so every renderable
is rendered here first and each character `quoting.shown` escapes becomes its visible escape: a
control character (`\\x1b`), an invisible one (`\\u202e`), a letter a reader takes for another (the
Cyrillic а of "аpi", `\\u0430`); the styles rich adds and the progress bar's cursor moves are left as
they are. Rich's `Text` deletes a bell, a backspace, a vertical tab, a form feed and a carriage return
as it is built, which would show `approve\\rreject` as "approvereject", so a string printed
(`Console.render_str`) and a line built into a `Text` here (`kept`) carry them as escapes before.

    console = console_for(sys.stdout)
    console.print("rule: \\x1b[2J")   # an ESC there prints as the four characters \\x1b, then [2J

A unified diff is printed through `coloured`, never wrapped: a line wrapped at the console's width
would start its rest without its `+` or `-`, which reads as a line of context.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Literal, TextIO, cast

from rich.console import Console, ConsoleOptions, ConsoleRenderable, JustifyMethod, OverflowMethod, RenderableType, RenderHook
from rich.control import STRIP_CONTROL_CODES
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from agentdescent.agents.redact import RedactingStream
from agentdescent.quoting import escaped, shown

DEFAULT_WIDTH = 80  # rich's own width where it cannot ask a terminal
_STRIPPED = re.compile("[" + "".join(map(chr, STRIP_CONTROL_CODES)) + "]")  # what rich's Text deletes as it is built


def console_for(stream: TextIO | None, *, width: int | None = None, force_terminal: bool | None = None,
                color_system: Literal["auto", "standard", "256", "truecolor", "windows"] | None = "auto") -> Console:
    """A console on `stream` that redacts keys and shows control characters as text; None (a
    closed stdout, `>&-`) prints nothing. A width of 0 (`COLUMNS=0`) is taken as `DEFAULT_WIDTH`.
    The keywords are rich's `Console`'s, with its defaults."""
    if stream is None:
        stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - it lives as long as the console
    # A RedactingStream is the stream it wraps but for `write` (its other attributes are the stream's).
    redacted = cast(TextIO, RedactingStream(stream))
    console = _Console(file=redacted, width=width, force_terminal=force_terminal, color_system=color_system)
    if console.width < 1:  # COLUMNS=0, which rich takes as a width of nothing and prints nothing, errors too
        console.width = DEFAULT_WIDTH
    console.push_render_hook(_ShownControls())
    return console


def lines(text: str) -> list[str]:
    """`text`'s lines, broken at newlines only: str.splitlines also breaks at U+2028, U+0085 and
    the like, and a line of a diff broken there reads as a line of its own, a forged one too."""
    found = text.split("\n")
    return found[:-1] if found and found[-1] == "" else found


def kept(text: str) -> str:
    """`text` with the control characters rich's `Text` deletes as their escapes, for a `Text` built
    of it, so that it shows what it holds: kept("approve\\rreject") == "approve\\\\x0dreject" """
    return _STRIPPED.sub(lambda found: escaped(found.group()), text)


def coloured(diff: str) -> Text:
    """A unified diff, its added lines green, removed ones red and hunk headers cyan; print it with
    `soft_wrap=True`, so that each line stays one line (a terminal folds it, keeping its mark first).
    A carriage return ending a line shows too: a change of line endings alone would draw its lines alike."""
    styles = {"+++": "bold", "---": "bold", "@@": "cyan", "+": "green", "-": "red"}
    styled = [Text(kept(line), style=next((s for p, s in styles.items() if line.startswith(p)), "")) for line in lines(diff)]
    return Text("\n", no_wrap=True, overflow="ignore").join(styled)


class _Console(Console):
    """rich's console, but that a string it prints keeps what rich's `Text` would delete, as escapes."""

    def render_str(self, text: str, *, style: str | Style = "", justify: JustifyMethod | None = None,
                   overflow: OverflowMethod | None = None, emoji: bool | None = None, markup: bool | None = None,
                   highlight: bool | None = None, highlighter: Callable[[str | Text], Text] | None = None) -> Text:
        return super().render_str(kept(text), style=style, justify=justify, overflow=overflow, emoji=emoji, markup=markup,
                                  highlight=highlight, highlighter=highlighter)


class _ShownControls(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Shown(renderable) for renderable in renderables]


class _Shown:
    """A renderable whose text segments carry no control character, nor invisible one, nor letter
    a reader takes for another (rich's own controls pass)."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.inner, options):
            text = segment.text if segment.control else shown(segment.text)
            yield segment if text == segment.text else Segment(text, segment.style)
