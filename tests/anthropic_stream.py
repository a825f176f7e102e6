"""A scripted model behind Anthropic's streaming Messages API, to drive the real Claude Code offline.

    def script(chat: Chat) -> Reply:
        if not chat.results("runs"):
            return chat.use("runs")               # the tool, or the step that makes it callable first
        return "There are no runs."

    model = ScriptedModel(script, prefix="mcp__plugin_agentdescent_agentdescent__")
    with LoopbackServer(model) as server:
        ...  # claude -p ... with ANTHROPIC_BASE_URL=server.url

Each POST /v1/messages is answered with the event sequence Claude Code reads: `message_start`,
then per block `content_block_start`, one `content_block_delta` (`text_delta` or
`input_json_delta`) and `content_block_stop`, then `message_delta` (the stop reason) and
`message_stop`. A request that offers no tools, or whose messages lack `marker` (a side request:
a title, a summary), gets `side` text and never reaches the script. A script that raises answers
a 400, which Claude Code does not retry, and the exception lands in `model.errors`.

Claude Code 2.1.332 defers MCP tools: a request names them in a system text and offers only
`ToolSearch`; once `ToolSearch` selected them (`select:A,B`), they are in `tools` too (with
`defer_loading`). A server still connecting is not named at all (`MCP_CONNECTION_NONBLOCKING=false`
makes claude wait for it, yet a plugin's server slow to start on a loaded machine can miss the
first request); a `WaitForMcpServers` tool may be offered then. `Chat.use` takes whichever step
comes first, and with none of them spends a turn (a Read of os.devnull, a second apart, at most
`WAITS`) until the server's tools are named. Left out: thinking blocks, token counting, images.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.loopback import Request, Response, error_response, event_stream

__all__ = ["Chat", "Reply", "Result", "ScriptedModel", "ToolUse"]

_ids = itertools.count(1)
WAITING = {"file_path": os.devnull}  # a turn the model spends while our server connects (a Read it may be refused)
WAITS = 60


@dataclass(frozen=True)
class ToolUse:
    """One tool call the model makes (`name` as Claude Code offers it)."""

    name: str
    input: dict[str, Any]


Reply = str | ToolUse | list[str | ToolUse]  # several ToolUse in one reply are parallel calls


@dataclass(frozen=True)
class Result:
    """A tool call of the model's and what came back for it (`value` parsed from JSON when it is JSON)."""

    id: str
    name: str
    input: dict[str, Any]
    text: str
    value: Any
    is_error: bool


class Chat:
    """One request of Claude Code's main loop, as the script reads it."""

    def __init__(self, body: dict[str, Any], prefix: str) -> None:
        self.body, self.prefix = body, prefix
        self.offered = {tool["name"] for tool in body.get("tools", [])}
        self.calls = [block for message in body["messages"] if message["role"] == "assistant"
                      for block in _blocks(message) if block.get("type") == "tool_use"]
        returned = {block["tool_use_id"]: block for message in body["messages"] if message["role"] == "user"
                    for block in _blocks(message) if block.get("type") == "tool_result"}
        self.history = [_result(call, returned[call["id"]]) for call in self.calls  # a wait (`use`) is none of the script's
                        if call["id"] in returned and not _waiting(call)]

    def full(self, tool: str) -> str:
        return tool if tool in self.offered or "__" in tool else self.prefix + tool

    def results(self, tool: str) -> list[Result]:
        """What came back for each call of `tool` (a short name gets the prefix), oldest first."""
        return [r for r in self.history if r.name == self.full(tool)]

    def last(self) -> list[Result]:
        """The results of the model's latest message (every call it made in it, in parallel)."""
        latest = next((m for m in reversed(self.body["messages"]) if m["role"] == "assistant"), {})
        ids = {block["id"] for block in _blocks(latest) if block.get("type") == "tool_use"}
        return [r for r in self.history if r.id in ids]

    def use(self, tool: str, **arguments: Any) -> ToolUse:
        """A call of `tool`, or the step Claude Code needs first: ToolSearch to load the deferred
        schemas of every tool of ours it announced, or WaitForMcpServers while none is announced."""
        name = self.full(tool)
        if name in self.offered:
            return ToolUse(name, arguments)
        announced = sorted(set(_names(json.dumps(self.body.get("messages")) + json.dumps(self.body.get("system")),
                                      self.prefix)))
        if "ToolSearch" in self.offered and name in announced:
            return ToolUse("ToolSearch", {"query": "select:" + ",".join(announced)})
        if "WaitForMcpServers" in self.offered:
            return ToolUse("WaitForMcpServers", {})
        if "Read" in self.offered and sum(map(_waiting, self.calls)) < WAITS:
            time.sleep(1)  # a loaded machine starts our server after claude's first request: the model waits a turn
            return ToolUse("Read", WAITING)
        raise AssertionError(f"{name} is neither offered nor announced (is its server still connecting? "
                             f"MCP_CONNECTION_NONBLOCKING=false makes claude wait); offered: {sorted(self.offered)}")


Script = Callable[[Chat], Reply]


class ScriptedModel:
    """The request handler for a `LoopbackServer` (see the module docstring)."""

    def __init__(self, script: Script, *, prefix: str = "", marker: str = "", side: str = "AgentDescent run") -> None:
        self.script, self.prefix, self.marker, self.side = script, prefix, marker, side
        self.chats: list[Chat] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        body = request.json
        if request.method != "POST" or request.path != "/v1/messages" or not isinstance(body, dict):
            return error_response(404, f"no route {request.method} {request.path}", anthropic=True)
        if not body.get("tools") or self.marker not in json.dumps(body.get("messages")):
            return _answer(body, [self.side])
        chat = Chat(body, self.prefix)
        with self._lock:
            self.chats.append(chat)
        try:
            reply = self.script(chat)
        except Exception as exc:  # noqa: BLE001 -- a script bug must reach the test, and claude must stop at once
            with self._lock:
                self.errors.append(exc)
            return error_response(400, f"the scripted model failed: {exc!r}", anthropic=True)
        blocks = reply if isinstance(reply, list) else [reply]
        return _answer(body, [b for i, b in enumerate(blocks) if b not in blocks[:i]])  # one ToolSearch, not two


def _answer(body: dict[str, Any], blocks: list[str | ToolUse]) -> Response:
    message = {"id": f"msg_{next(_ids)}", "type": "message", "role": "assistant", "content": [],
               "model": body.get("model", "scripted"), "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 1, "output_tokens": 1}}
    stop = "tool_use" if any(isinstance(b, ToolUse) for b in blocks) else "end_turn"
    if not body.get("stream"):
        content = [{"type": "text", "text": b} if isinstance(b, str) else
                   {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": b.name, "input": b.input} for b in blocks]
        return Response(body={**message, "content": content, "stop_reason": stop})
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index, block in enumerate(blocks):
        if isinstance(block, str):
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block}
        else:
            start = {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": block.name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.input)}
        events += [{"type": "content_block_start", "index": index, "content_block": start},
                   {"type": "content_block_delta", "index": index, "delta": delta},
                   {"type": "content_block_stop", "index": index}]
    events += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 1}}, {"type": "message_stop"}]
    return event_stream(events)


def _waiting(call: dict[str, Any]) -> bool:
    return call.get("name") == "Read" and call.get("input") == WAITING


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _result(call: dict[str, Any], returned: dict[str, Any]) -> Result:
    content = returned.get("content")
    text = content if isinstance(content, str) else "".join(
        part.get("text", "") for part in content or [] if isinstance(part, dict))
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return Result(call["id"], call["name"], call.get("input") or {}, text, value, bool(returned.get("is_error")))


def _names(text: str, prefix: str) -> list[str]:
    return re.findall(re.escape(prefix) + r"\w+", text) if prefix else []
