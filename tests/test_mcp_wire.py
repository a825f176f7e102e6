"""The server's stdio wire as a host writes it (`agentdescent_mcp/wire.py`): `agentdescent-mcp` a
subprocess, each line written raw, as Claude Code's JSON writes a lone surrogate (`"\\ud800"`: half
of an emoji a model cut in two). The SDK dropped such a request unanswered, and the host waited on
it until its own timeout; it is now answered under its id, naming the argument, and nothing is done."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp_support import program_env

WAIT = 20  # seconds a line may take: the program's start on a busy machine, not a figure asserted


@pytest.fixture
def wire(service, tmp_path):
    """`send(raw line)` and `answer()` (the next line the program writes, as JSON) on `agentdescent-mcp`,
    initialised with the handshake hosts use today."""
    program = Path(sys.executable).with_name("agentdescent-mcp")
    process = subprocess.Popen([str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=program_env(service.store.root.parent, tmp_path), cwd=tmp_path)

    def send(line: str) -> None:
        process.stdin.write(line.encode("utf-8") + b"\n")
        process.stdin.flush()

    def answer() -> dict:
        ready, _, _ = select.select([process.stdout], [], [], WAIT)
        if not ready:
            process.kill()  # its stderr is read whole only once it has ended
            pytest.fail(f"no answer in {WAIT} s; its stderr: {process.communicate()[1][-2000:]!r}")
        return json.loads(process.stdout.readline())

    send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}}))
    assert answer()["id"] == 0
    send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    try:
        yield send, answer
    finally:
        process.kill()
        process.wait()


def test_a_request_with_a_lone_surrogate_is_answered_under_its_id_and_the_next_one_too(wire, tmp_path):
    send, answer = wire
    target = tmp_path / "prompt.md"
    send('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"plan","arguments":{"spec":{"target":"%s\\ud83d",'
         '"tasks":[{"id":"t0","prompt":"hi","gold":"x"}]}}}}' % target)
    said = answer()
    assert said["id"] == 7 and said["error"]["code"] == -32602, said
    assert said["error"]["message"].startswith("tools/call: arguments.spec.target holds a lone surrogate (\\ud83d)")
    assert "nothing was done" in said["error"]["message"]
    assert list(tmp_path.iterdir()) == []  # nothing was written, no run made

    # in an argument's name, and in a notification (no id: nothing to answer), then a request as usual
    send('{"jsonrpc":"2.0","id":"k","method":"tools/call","params":{"name":"runs","arguments":{"a\\udc00":1}}}')
    assert answer() == {"jsonrpc": "2.0", "id": "k", "error": {"code": -32602, "message": (
        "tools/call: arguments holds a lone surrogate (\\udc00), half of a character, which no UTF-8 text can hold, so "
        "nothing was done: send the text with the character whole (or without it) and call again")}}
    send('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"\\ud800","progress":1}}')
    send('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"runs","arguments":{"a":"\\ud800"}}}')  # no id to echo
    send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "runs", "arguments": {}}}))
    listed = answer()
    assert listed["id"] == 8 and listed["result"]["structuredContent"]["runs"] == []
