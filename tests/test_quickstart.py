"""The dataset quickstart, run as a user runs it, against a loopback OpenAI-compatible server.

The server's model is scripted: it answers arithmetic questions verbosely ("Let me work through
it...") unless its instructions tell it to give the answer only, and as a reflector it proposes
exactly that rule. Exact match on held-out questions must rise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.loopback import LoopbackServer, openai_chat

ROOT = Path(__file__).resolve().parents[1]


def fake_model(prompt: str) -> str:
    if "<instructions>" in prompt:  # the reflector's prompt
        return "The answer buries the number in prose.\n<rule>Reply with the final answer only, no working.</rule>"
    a, b = map(int, re.search(r"What is (\d+) plus (\d+)\?", prompt).groups())
    if "final answer only" in prompt:
        return str(a + b)
    return f"Let me work through it. {a} plus {b} makes {a + b}. So the answer is {a + b}."


def write_rows(path: Path, n: int = 24) -> None:
    rows = [{"question": f"What is {i} plus {2 * i + 1}?", "answer": f"#### {3 * i + 1}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_dataset_quickstart_learns_to_answer_briefly(tmp_path):
    rows = tmp_path / "rows.jsonl"
    write_rows(rows)
    with LoopbackServer(openai_chat(fake_model)) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test-quickstart",
               "AGENTDESCENT_MODEL": "fake-arith", "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-m", "examples.quickstart_dataset", "--rows", str(rows), "--rounds", "3", "--workers", "3"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    before, after = map(float, re.search(r"held-out reward: ([\d.]+) -> ([\d.]+)", done.stdout).groups())
    assert before == 0.0 and after == 1.0
    assert "final answer only" in done.stdout  # the learned prompt is printed
    assert requests and all(r.path == "/v1/chat/completions" for r in requests)
    assert all(r.headers["authorization"] == "Bearer sk-test-quickstart" for r in requests)
    assert all(r.json["model"] == "fake-arith" for r in requests)
    assert "sk-test-quickstart" not in done.stdout + done.stderr
    ledger = re.search(r"ledger: (\S+)", done.stdout).group(1)
    history = subprocess.run(["git", "-C", ledger, "log", "-p", "--all"], capture_output=True, text=True).stdout
    assert "final answer only" in history  # the ledger holds the learned change...
    assert "sk-test-quickstart" not in history  # ...and never the key
