"""Real HTTP servers on 127.0.0.1 for tests: a handler function in, a URL out, every request kept.

    def handler(request: Request) -> Response:
        return Response(body={"echo": request.json})          # a dict or list is sent as JSON

    with LoopbackServer(handler) as server:
        httpx.post(server.url + "/anything", json={"a": 1})
        assert server.requests[0].path == "/anything"

A `Response` can wait before answering (`delay=`, to stand for a hung server), send its body a
byte at a time with a pause between bytes (`trickle=`, and `trickle_headers=True` to send the
status line and headers that way too), or send a body made on the fly in chunks (`stream=`, a
function returning an iterable of bytes, so a huge body is never held whole); every wait ends
early when the server closes, so tests stay fast. A handler that raises answers 500 and the
exception lands in `server.errors`. `openai_chat(reply_fn)` and `anthropic_messages(reply_fn)`
are ready-made handlers speaking those two APIs; `closed_port_url()` is a URL nothing listens on.

Left out: TLS, chunked encoding and keep-alive (HTTP/1.0: one request a connection, and a body
sent with `stream=` ends when the connection closes).
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["LoopbackServer", "Request", "Response", "anthropic_messages", "closed_port_url", "openai_chat"]


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request as the server saw it; header names are lower-case."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    json: Any = None  # the body parsed as JSON, or None when it is not JSON


@dataclass(kw_only=True)
class Response:
    """What a handler answers. A dict or list body is sent as JSON, a str as UTF-8 text."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | str | dict | list | None = None
    delay: float = 0.0  # seconds to wait before answering
    trickle: float = 0.0  # seconds between single bytes of the body (0: all at once)
    trickle_headers: bool = False  # trickle the status line and headers too
    stream: Callable[[], Iterable[bytes]] | None = None  # the body's chunks, made as they are sent

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        """The body's bytes and the headers to send with it (a content type added when missing)."""
        headers = {name.lower(): value for name, value in self.headers.items()}
        if isinstance(self.body, (dict, list)):
            headers.setdefault("content-type", "application/json")
            return json.dumps(self.body).encode("utf-8"), headers
        if isinstance(self.body, str):
            headers.setdefault("content-type", "text/plain; charset=utf-8")
            return self.body.encode("utf-8"), headers
        return self.body or b"", headers


Handler = Callable[[Request], Response]


class LoopbackServer:
    """A `ThreadingHTTPServer` on 127.0.0.1 (a free port) serving `handler` from a daemon thread.

    Use it as a context manager, or call `start()` and `close()`. `url` has no trailing slash;
    `requests` lists every request in arrival order (thread-safe to read after the calls return).
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="loopback", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; handlers still waiting out a `delay` return at once."""
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def answer(self, request: Request) -> Response:
        """Record `request` and run the handler; a handler that raises answers 500."""
        with self._lock:
            self.requests.append(request)
        try:
            return self.handler(request)
        except Exception as exc:  # noqa: BLE001 -- a handler bug must reach the test, not kill the thread
            with self._lock:
                self.errors.append(exc)
            return Response(status=500, body={"error": {"message": f"handler raised {exc!r}"}})


def _handler_class(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._serve()

        do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

        def _serve(self) -> None:
            response = server.answer(_read_request(self))
            if response.delay and server.closing.wait(response.delay):
                return
            try:
                if response.trickle or response.stream is not None:
                    self._send_slowly(response)
                else:
                    self._send(response)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing left to tell it

        def _send(self, response: Response) -> None:
            body, headers = response.encoded()
            self.send_response(response.status)
            for name, value in {**headers, "content-length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _send_slowly(self, response: Response) -> None:
            """Write the answer raw: trickled, or streamed (no content-length: the body ends with the connection)."""
            body, headers = response.encoded()
            if response.stream is None:
                headers["content-length"] = str(len(body))
            phrase = self.responses.get(response.status, ("",))[0]
            head = "".join([f"{self.protocol_version} {response.status} {phrase}\r\n",
                            *(f"{name}: {value}\r\n" for name, value in headers.items()), "\r\n"])
            if not self._write(head.encode("latin-1"), response.trickle if response.trickle_headers else 0.0):
                return
            for chunk in response.stream() if response.stream is not None else [body]:
                if self.command == "HEAD" or not self._write(chunk, response.trickle):
                    return

        def _write(self, data: bytes, pause: float) -> bool:
            """Send `data`, a byte at a time `pause` seconds apart if `pause`; False once the server closes."""
            if not pause:
                self.wfile.write(data)
                return not server.closing.is_set()
            for index in range(len(data)):
                if server.closing.wait(pause):
                    return False
                self.wfile.write(data[index:index + 1])
            return True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return _Handler


def _read_request(handler: BaseHTTPRequestHandler) -> Request:
    length = int(handler.headers.get("content-length") or 0)
    body = handler.rfile.read(length) if length else b""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    split = urlsplit(handler.path)
    return Request(method=handler.command, path=split.path, query=parse_qs(split.query),
                   headers={name.lower(): value for name, value in handler.headers.items()}, body=body, json=parsed)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# Fake model servers. `reply_fn(prompt_text)` returns the reply text, or a `Response` to send as
# is (an error, a malformed body, a delay). Token counts are words, so they differ from the
# client's own estimate (characters / 4) and a test can tell which one was recorded; a reply of
# more words than the request's `max_tokens` is cut there, as a real server stops at its limit.

ReplyFn = Callable[[str], "str | Response"]
_ids = itertools.count(1)


def openai_chat(reply_fn: ReplyFn, *, model: str | None = None) -> Handler:
    """A handler speaking OpenAI's chat completions at any path ending in /chat/completions."""

    def handle(request: Request) -> Response:
        body = request.json
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            return error_response(404, f"no route {request.method} {request.path}")
        if not isinstance(body, dict) or "model" not in body or not body.get("messages"):
            return error_response(400, "the body needs 'model' and 'messages'")
        prompt = _last_user_text(body["messages"])
        reply = reply_fn(prompt)
        if isinstance(reply, Response):
            return reply
        reply, cut = _limited(reply, body.get("max_tokens"))
        prompt_tokens = sum(_words(m.get("content")) for m in body["messages"])
        completion = {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "model": model or body["model"],
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                   "finish_reason": "length" if cut else "stop"}],
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": _words(reply),
                                "total_tokens": prompt_tokens + _words(reply)}}
        return Response(body=completion)

    return handle


def anthropic_messages(reply_fn: ReplyFn) -> Handler:
    """A handler speaking Anthropic's Messages API at POST /v1/messages."""

    def handle(request: Request) -> Response:
        body = request.json
        if request.method != "POST" or request.path != "/v1/messages":
            return error_response(404, f"no route {request.method} {request.path}", anthropic=True)
        if not isinstance(body, dict) or not {"model", "max_tokens", "messages"} <= body.keys():
            return error_response(400, "the body needs 'model', 'max_tokens' and 'messages'", anthropic=True)
        prompt = _last_user_text(body["messages"])
        reply = reply_fn(prompt)
        if isinstance(reply, Response):
            return reply
        reply, cut = _limited(reply, body["max_tokens"])
        input_tokens = _words(prompt) + _words(body.get("system"))
        message = {"id": f"msg_{next(_ids)}", "type": "message", "role": "assistant",
                   "content": [{"type": "text", "text": reply}], "model": body["model"],
                   "stop_reason": "max_tokens" if cut else "end_turn",
                   "usage": {"input_tokens": input_tokens, "output_tokens": _words(reply)}}
        return Response(body=message)

    return handle


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    return ""


def _limited(reply: str, max_tokens: Any) -> tuple[str, bool]:
    """`reply` as a server with this output limit sends it (its first `max_tokens` words), and
    whether it was cut."""
    if not isinstance(max_tokens, int) or _words(reply) <= max_tokens:
        return reply, False
    end = [m.end() for m in re.finditer(r"\S+", reply)][max_tokens - 1] if max_tokens > 0 else 0
    return reply[:end], True


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def event_stream(events: list[dict[str, Any]]) -> Response:
    """Server-sent events, each named by its "type", as the streaming APIs send them."""
    text = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events)
    return Response(body=text, headers={"content-type": "text/event-stream"})


def error_response(status: int, message: str, *, anthropic: bool = False) -> Response:
    """An error in the provider's shape: Anthropic's, or OpenAI's."""
    if anthropic:
        return Response(status=status, body={"type": "error", "error": {"type": "invalid_request_error",
                                                                        "message": message}})
    return Response(status=status, body={"error": {"message": message, "type": "invalid_request_error"}})
