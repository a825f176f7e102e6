"""The dataset quickstart: learn a system prompt for your model on a Hugging Face dataset.

The score is exact match on the final answer, so what gets learned is mostly how to answer:
what a reflector can see from the failures.

It reads the model from the environment, so it runs as written against any OpenAI-compatible
server (OpenAI, DeepSeek, GLM, vLLM, llama.cpp's server):

    export OPENAI_BASE_URL=https://api.openai.com/v1   # or your server's /v1 address
    export OPENAI_API_KEY=...                          # whatever your server expects
    export AGENTDESCENT_MODEL=gpt-4o-mini              # the model name your server knows
    python -m examples.quickstart_dataset              # grade-school maths from the hub
    python -m examples.quickstart_dataset --rows my.jsonl   # your own rows: {"question", "answer"}

Rows from the hub need network access to the Hugging Face datasets-server (or HF_ENDPOINT).
"""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from agentdescent import SingleSlot, evolve, reflector, scorer, tasks_from
from agentdescent.agents import openai_compatible
from agentdescent.cli.guard import script
from agentdescent.cli.views import ProgressView
from agentdescent.dataloader import hf_rows, jsonl_rows


def final_answer(row: dict) -> str:
    """GSM8K-style answers end with '#### <number>'; plain answers are used as they are."""
    return str(row["answer"]).split("####")[-1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", help="a local .jsonl file of {question, answer} rows instead of the hub")
    parser.add_argument("--limit", type=int, default=40, help="rows to use (default 40)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    rows = jsonl_rows(args.rows, limit=args.limit) if args.rows else hf_rows("openai/gsm8k", "test", config="main", limit=args.limit)
    tasks = tasks_from(rows, prompt="question", gold=final_answer)
    model = openai_compatible(os.environ.get("AGENTDESCENT_MODEL", "gpt-4o-mini"))

    def run(system_prompt: str, task) -> str:
        return model(f"{system_prompt}\n\n{task.prompt}")

    view = ProgressView(Console())  # a run against a real model takes minutes: show each round land
    with view:
        result = evolve(
            tasks, scorer("exact"), run=run, propose=reflector(model),
            strategy=SingleSlot("Solve the problem."), rounds=args.rounds, n_workers=args.workers,
            on_event=view.on_event,
        )
    print(f"stopped: {result.stop_reason}")
    for warning in result.warnings:
        print(f"warning: {warning}")
    print(f"held-out reward: {result.initial_reward:.3f} -> {result.final_reward:.3f}")
    print(f"outcomes: {result.outcomes()}")
    print(f"model calls: {result.usage.model.calls}, tokens: {result.usage.tokens}")
    print("learned prompt:")
    print(result.rendered)
    print(f"ledger: {result.ledger_path}")


if __name__ == "__main__":
    script(main)  # an error is one line with its fix (--debug: the traceback)
