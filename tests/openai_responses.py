"""A scripted model behind OpenAI's streaming Responses API, to drive the real Codex CLI offline.

    def script(turn: Turn) -> Reply:
        if not turn.results("runs"):
            return turn.use("runs")               # the tool, or the step that makes it callable first
        return "There are no runs."

    model = ScriptedModel(script, namespace="mcp__agentdescent")
    with LoopbackServer(model) as server:
        (codex_home / "config.toml").write_text(codex_config(server.url))
        ...  # codex exec, with LOOPBACK_API_KEY set to anything

Each POST .../responses is answered, in one body, with the server-sent events Codex 0.171.0 reads:
`response.created`, then per output item `response.output_item.added` and
`response.output_item.done`, then `response.completed` (with usage). A reply is a text (a
`message` item) or tool calls (`function_call` items; a call of an MCP tool carries the
`namespace` Codex offers the server's tools under, `mcp__SERVER`). Codex offers those tools only
once the server has started, a second or more in: until then `Turn.use` calls
`list_mcp_resources` with the server's name, which waits for it. Codex hands a tool's answer back
as text (`Wall time: ... Output:` and the structured JSON); `Result.value` is that JSON. A script
that raises answers a 400 (which ends Codex's turn) and the exception lands in `model.errors`.
Left out: text deltas, reasoning items, the websocket transport, non-streamed answers.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.loopback import Request, Response, error_response, event_stream

__all__ = ["Call", "Reply", "Result", "ScriptedModel", "Turn", "codex_config"]

_ids = itertools.count(1)


@dataclass(frozen=True)
class Call:
    """One tool call the model makes: `namespace` is None for Codex's own tools."""

    name: str
    arguments: dict[str, Any]
    namespace: str | None = None


Reply = str | Call | list[Call]  # several calls in one reply are parallel calls


@dataclass(frozen=True)
class Result:
    """A tool call of the model's and what came back for it (`value`: the JSON in it, or None)."""

    call_id: str
    name: str
    namespace: str | None
    arguments: dict[str, Any]
    text: str
    value: Any


class Turn:
    """One request of Codex's loop, as the script reads it."""

    def __init__(self, body: dict[str, Any], namespace: str) -> None:
        self.body, self.namespace = body, namespace
        self.offered = {tool.get("name") for tool in body.get("tools", [])} - {None}  # functions; namespaces by name
        items = [item for item in body.get("input", []) if isinstance(item, dict)]
        returned = {item["call_id"]: item for item in items if item.get("type") == "function_call_output"}
        self.history = [_result(item, returned[item["call_id"]]) for item in items
                        if item.get("type") == "function_call" and item.get("call_id") in returned]

    def texts(self) -> str:
        """Every text the request gives the model (instructions, skills, messages), joined."""
        return json.dumps(self.body.get("input")) + json.dumps(self.body.get("instructions"))

    def results(self, tool: str) -> list[Result]:
        """What came back for each call of our server's `tool`, oldest first."""
        return [r for r in self.history if r.name == tool and r.namespace == self.namespace]

    def use(self, tool: str, **arguments: Any) -> Call:
        """A call of our server's `tool`, or, while Codex does not offer the server's tools yet,
        `list_mcp_resources` on the server, which returns once it has started."""
        if self.namespace in self.offered:
            return Call(tool, arguments, self.namespace)
        if "list_mcp_resources" in self.offered:
            return Call("list_mcp_resources", {"server": self.namespace.removeprefix("mcp__")})
        raise AssertionError(f"{self.namespace} is not offered, nor list_mcp_resources; offered: {sorted(self.offered)}")


Script = Callable[[Turn], Reply]


class ScriptedModel:
    """The request handler for a `LoopbackServer` (see the module docstring)."""

    def __init__(self, script: Script, *, namespace: str) -> None:
        self.script, self.namespace = script, namespace
        self.turns: list[Turn] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        body = request.json
        if request.method != "POST" or not request.path.endswith("/responses") or not isinstance(body, dict):
            return error_response(404, f"no route {request.method} {request.path}")
        turn = Turn(body, self.namespace)
        with self._lock:
            self.turns.append(turn)
        try:
            reply = self.script(turn)
        except Exception as exc:  # noqa: BLE001 -- a script bug must reach the test, and codex must stop at once
            with self._lock:
                self.errors.append(exc)
            return error_response(400, f"the scripted model failed: {exc!r}")
        return _answer(reply if isinstance(reply, list) else [reply])


def codex_config(model_url: str) -> str:
    """A user's config.toml that sends every model request to the loopback server at `model_url`, and nothing to anyone else."""
    return (f'model = "scripted"\nmodel_provider = "loopback"\ncheck_for_update_on_startup = false\n\n'
            f'[analytics]\nenabled = false\n\n'
            f'[model_providers.loopback]\nname = "loopback"\nbase_url = "{model_url}/v1"\n'
            f'wire_api = "responses"\nenv_key = "LOOPBACK_API_KEY"\n')


def _answer(reply: list[str | Call]) -> Response:
    response_id = f"resp_{next(_ids)}"
    items = [_item(part) for part in reply]
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": response_id}}]
    for index, item in enumerate(items):
        events += [{"type": "response.output_item.added", "output_index": index, "item": item},
                   {"type": "response.output_item.done", "output_index": index, "item": item}]
    events.append({"type": "response.completed", "response": {
        "id": response_id, "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}})
    return event_stream(events)


def _item(part: str | Call) -> dict[str, Any]:
    n = next(_ids)
    if isinstance(part, str):
        return {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": part, "annotations": []}]}
    item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": part.name,
            "arguments": json.dumps(part.arguments), "status": "completed"}
    return {**item, "namespace": part.namespace} if part.namespace else item


def _result(call: dict[str, Any], returned: dict[str, Any]) -> Result:
    output = returned.get("output")
    text = output if isinstance(output, str) else "".join(
        part.get("text", "") for part in output or [] if isinstance(part, dict))
    _, _, body = text.partition("Output:\n")
    try:
        value = json.loads(body or text)
    except ValueError:
        value = None
    try:
        arguments = json.loads(call.get("arguments") or "{}")
    except ValueError:
        arguments = {}
    return Result(call["call_id"], call["name"], call.get("namespace"), arguments, text, value)
