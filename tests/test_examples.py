"""The examples run as written, and say what they claim."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from examples.evolve_own_skill import ASKED_OF_THE_DOCS, SKILL, evolve_own_skill, teachings
from examples.rq2_staleness import one
from examples.run_async import timed_run
from examples.run_demo import forked, merged


def test_merging_beats_forking_at_an_equal_budget():
    merge = merged(seed=0, workers=8, budget=1600, ms=0)
    best_fork, fork_calls = forked(seed=0, workers=8, budget=1600, ms=0)
    # Merge keeps to the budget; each fork's first round has no cost to go by and may pass its
    # slice, so the forks spend more, which only helps them.
    assert merge.usage.calls <= min(1600, fork_calls)
    assert merge.final_reward > best_fork.final_reward


def test_the_asynchronous_example_improves_and_counts_its_stragglers():
    few = timed_run(seed=0, workers=4, sigma=1.0, asynchronous=True, rounds=4)
    assert few["steps"] == 4 and 0.0 < few["reward"] <= 1.0 and few["calls"] > 0 and few["reissued"] >= 0


def test_the_staleness_sweep_rebases_what_a_budget_of_0_would_drop():
    rebase, drop = one(seed=0, budget=0, how="rebase", steps=4), one(seed=0, budget=0, how="drop", steps=4)
    assert rebase["dropped"] == 0 and drop["rebased"] == 0
    assert rebase["rebased"] + drop["dropped"] > 0  # eight workers on lognormal latency fall behind head


ROOT = Path(__file__).resolve().parents[1]


def test_the_plugin_evolving_its_own_skill_learns_what_the_docs_say(tmp_path):
    copy = tmp_path / "agentdescent"
    shutil.copytree(SKILL, copy)
    result = evolve_own_skill(copy, store=tmp_path / "ledger")
    assert result.initial_reward < 0.8 and result.final_reward == 1.0  # the shipped skill misses what only the docs say
    learned = result.state["SKILL.md"]
    for question, _, _, _ in ASKED_OF_THE_DOCS:
        assert teachings()[question][0] in learned  # the documentation's own sentence, word for word


def test_the_own_skill_example_says_what_it_wrote_in_a_sentence(tmp_path):
    done = subprocess.run([sys.executable, "-m", "examples.evolve_own_skill"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    before, after = map(float, re.search(r"reward on the skill's own questions: ([\d.]+) -> ([\d.]+)", done.stdout).groups())
    assert before < after == 1.0
    assert re.search(r"^wrote SKILL\.md in .+; the previous version is in .+\.agentdescent\.bak-1/agentdescent$",
                     done.stdout, re.MULTILINE), done.stdout
    assert "WritePlan(" not in done.stdout


def test_an_example_without_its_key_ends_in_one_line_that_says_how_to_fix_it(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"question": "{n} + {n}", "answer": "{2 * n}"}}\n' for n in range(6)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DEEPSEEK_"))}
    done = subprocess.run([sys.executable, "-m", "examples.quickstart_dataset", "--rows", str(rows), "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**env, "TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith("error: ")
    assert "OPENAI_API_KEY is not set; export OPENAI_API_KEY=" in done.stderr
