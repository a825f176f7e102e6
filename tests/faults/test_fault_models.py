"""Model faults, each on its own task: the run completes, and each fault is a recorded failure.

A loopback server speaks the chat-completions API. By the task in the prompt it answers normally,
or with a storm of 429s (Retry-After 0) that ends within the client's retries, a 500 every time, a hang past the client's
timeout, a body that is not JSON, an empty completion, a 1 MB completion, bytes that are not
UTF-8, a reply trickled a byte at a time (past the call's deadline), or a 50 MB reply (past the
reply cap, which must not reach memory).
"""

from __future__ import annotations

import collections
import json
import re
import threading

import pytest

from agentdescent import Task, evolve
from agentdescent.agents import openai_compatible
from tests.loopback import LoopbackServer, Response, openai_chat

FAULTS = ["storm", "server-error", "hang", "garbage", "empty", "huge", "bad-bytes", "trickle", "flood"]
FLOOD_CHUNKS = 800  # of 64 KiB: 50 MB
REPLY = {"ok": "2026", "storm": "2026"}
# Wide enough for a storm's three attempts and a 1 MB answer on a loaded machine; a hang (60 s)
# and a trickle (a byte every 0.5 s) are far past it.
DEADLINE = 4.0


def serve():
    # counted per prompt (one task on one rendered state), so that two storm tasks in flight do not
    # take each other's answers: its first two requests are refused and every later one answered,
    # however many calls ask it at once (a draw again, a straggler's second run), so each call
    # ends within the client's four attempts with one to spare for an attempt a busy machine timed out
    storms: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def reply(prompt: str):
        kind = re.search(r"task: (\S+)", prompt).group(1)
        if kind == "storm":
            with lock:
                storms[prompt] += 1
                if storms[prompt] <= 2:
                    return Response(status=429, headers={"Retry-After": "0"}, body={"error": {"message": "slow down"}})
        if kind == "server-error":
            return Response(status=500, body={"error": {"message": "boom"}})
        if kind == "hang":
            return Response(delay=60, body={})
        if kind == "garbage":
            return Response(body="<html>502 Bad Gateway</html>")
        if kind == "empty":
            return ""
        if kind == "huge":
            return "2026 " * 200_000
        if kind == "bad-bytes":
            return Response(headers={"content-type": "application/json"}, body=b'{"choices": [\xff\xfe]}')
        if kind == "trickle":
            answer = {"choices": [{"message": {"role": "assistant", "content": "2026"}}]}
            return Response(trickle=0.5, body=json.dumps(answer))
        if kind == "flood":
            return Response(headers={"content-type": "application/json"},
                            stream=lambda: (b"2026" * 16384 for _ in range(FLOOD_CHUNKS)))
        return REPLY.get(kind, "2026")

    return openai_chat(reply)


@pytest.fixture
def model(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-faults-0000")
    with LoopbackServer(serve()) as server:
        yield openai_compatible("fault-model", base_url=server.url, timeout=DEADLINE, max_retries=3, backoff=(0.0, 0.01))


def test_each_model_fault_is_a_recorded_failure_and_the_run_completes(model, tmp_path):
    kinds = ["ok"] * 6 + FAULTS * 2
    tasks = [Task(id=f"{kind}-{i}", prompt=kind) for i, kind in enumerate(kinds)]
    # Seed 3 holds out a task of every fault, so that each is rolled out whatever the train
    # minibatches deal (what is measured, and when, shifts with the load), and three "ok" tasks:
    # a held-out set where every rollout fails stops the run, which is not what this test is about.
    # No tracemalloc here: it slows every allocation of the server's and the client's threads alike,
    # enough that a storm's attempts outlast the deadline; the flood's memory is measured on one
    # call in test_agents_http (test_a_huge_reply_is_cut_off_early_and_not_retried).
    result = evolve(tasks, lambda task, output: float("2026" in output),
                    run=lambda r, t: model(f"task: {t.prompt} {t.id}\n{r}"),
                    propose=lambda *a: "always state the year", rounds=2, n_workers=2, held_out_frac=0.6,
                    seed=3, store=tmp_path / "ledger")
    assert result.error is None and result.stop_reason.startswith("ran all")
    failed_kinds = {re.search(r"task «([a-z-]+)-\d+»", e).group(1) for e in result.usage.errors}
    assert failed_kinds == {"server-error", "hang", "garbage", "empty", "bad-bytes", "trickle", "flood"}, \
        "\n".join(result.usage.errors)  # storms end; huge is an answer
    said = " ".join(result.usage.errors)
    assert f"deadline of {DEADLINE:g} s" in said and "max_reply_chars=1,000,000" in said
    floods = [e for e in result.usage.errors if "task «flood-" in e]
    assert floods and all("the reply passed 8,065,536 bytes" in e for e in floods)  # cut off at the cap, not read whole
    assert result.usage.model.failures >= 5 and result.usage.failures >= 5
    assert all(o.kind != "error" for o in result.outcome_list)
