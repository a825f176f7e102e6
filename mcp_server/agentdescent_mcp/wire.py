"""The stdio wire the server talks on: the SDK's `stdio_server`, but that a request it cannot read
is answered. The SDK reads each line with pydantic's JSON reader, which refuses a string escape of
a lone surrogate (`"\\ud800"`, half of a character: a model's emoji cut in two makes one, and a
host's JSON writes it so), and drops the line with no answer; the host then waits on that call
until its own timeout. Python's `json` reads such a line: when it is a request, it is answered
under its id with an error naming the argument and what to send instead, and nothing is done.
A line that is no request, or no JSON at all, is dropped as before (there is no id to answer).

    answer_to(<the SDK's error reading {"id": 2, "method": "tools/call", "params": {"arguments":
              {"run_id": "ab\\ud800"}}}>).message.error.message
    == "tools/call: arguments.run_id holds a lone surrogate (\\ud800), ..."
"""

from __future__ import annotations

import json
import re
import sys
from types import TracebackType
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_PARAMS, ErrorData, JSONRPCError
from pydantic import ValidationError

from agentdescent.quoting import shown

_LONE = re.compile("[\ud800-\udfff]")  # in a str json made, any code point here is a lone surrogate
_LINE_CHARS = 4_000_000  # a line longer than this is not read again: the SDK's refusal stands, unanswered


async def serve(server: MCPServer) -> None:
    """Serve `server` over this process's stdin and stdout until the client closes them."""
    lowlevel = server._lowlevel_server  # what `MCPServer.run_stdio_async` runs, fed through `_Answering`
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(_Answering(read_stream, write_stream), write_stream, lowlevel.create_initialization_options())


def closed_stdio() -> str | None:
    """Why the server cannot talk (this process's stdin or stdout closed), or None."""
    closed = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)) if stream is None]
    if not closed:
        return None
    return (f"the MCP server talks over stdin and stdout, and this process was started with its {' and '.join(closed)} "
            "closed; start it with both open, as a host does (claude mcp add agentdescent -- agentdescent mcp)")


def answer_to(error: Exception) -> SessionMessage | None:
    """The error answer to a request the SDK could not read for a lone surrogate in it; None for
    any other error, and for a line that is no request."""
    if not isinstance(error, ValidationError):
        return None
    found = error.errors(include_url=False)
    line = found[0].get("input") if len(found) == 1 and found[0].get("type") == "json_invalid" else None
    if not isinstance(line, str) or len(line) > _LINE_CHARS:
        return None
    try:
        data = json.loads(line)
        is_request = (isinstance(data, dict) and isinstance(data.get("method"), str) and type(data.get("id")) in (int, str)
                      and not _LONE.search(f"{data['method']}{data['id']}"))  # an answer echoes its id, and names its method
        where = _lone_in(data.get("params"), "") if is_request else None
    except (ValueError, RecursionError):  # no JSON, or nested past what can be walked
        return None
    if where is None:
        return None
    path, char = where
    said = (f"{shown(data['method'][:60])}: {shown(path) or 'its parameters'} holds a lone surrogate (\\u{ord(char):04x}), half of a "
            "character, which no UTF-8 text can hold, so nothing was done: send the text with the character whole "
            "(or without it) and call again")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=data["id"], error=ErrorData(code=INVALID_PARAMS, message=said)))


def _lone_in(value: Any, path: str) -> tuple[str, str] | None:
    """(where in `value`, the surrogate) of the first lone surrogate in a key or a string of it."""
    if isinstance(value, str):
        found = _LONE.search(value)
        return (path, found.group()) if found else None
    pairs = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in pairs:
        name = f"{path}.{key}" if path else str(key)
        if isinstance(key, str) and (found := _LONE.search(key)):
            return (path, found.group())  # an argument's name: the mapping that holds it is named
        inner = _lone_in(item, name[:200])
        if inner is not None:
            return inner
    return None


class _Answering:
    """The read side of the SDK's stdio wire, but that a line it could not read for a lone
    surrogate is answered (`answer_to`) on the write side rather than passed on as an error."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner, self._write = inner, write

    @property
    def last_context(self) -> Any:  # the sender's context of the item received last, as the SDK's stream keeps it
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            answer = answer_to(item) if isinstance(item, Exception) else None
            if answer is None:
                return item
            await self._write.send(answer)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()
