"""LLM fusion's memory: a step asks the same merge more than once, and the model answers it once."""

from __future__ import annotations

import pickle
import re
import threading
from collections import Counter

from agentdescent import FileTree, Policies, evolve
from agentdescent.errors import AgentError
from agentdescent.reflect import fusion, llm_fusion
from agentdescent.step.policies import BetaAcceptance
from tests.doubles import numbered_tasks
from tests.test_aggregator import TASKS, diff, kinds, make


def _merging(prompt: str) -> str:
    return "<merged>Be very brief; cite sources.</merged>"


def test_the_same_merge_asked_again_in_a_run_is_answered_from_memory_not_by_the_model():
    """Three workers edit one line; the model merges two, and cannot merge the third in. The step
    folds its changes again once the contested ones are measured, and asked the model every merge
    of the fold again: each was paid for twice. (Which merges there are depends on the order the
    workers' diffs arrive in.)"""
    asked = []
    lines = iter(["Be very brief.", "Be brief; cite sources.", "Be kind."])
    propose = lambda *a: next((f'<file path="notes.md">{line}\n</file>' for line in lines), None)  # noqa: E731

    def model(prompt):
        asked.append(prompt)
        return "I cannot merge these." if "Be kind." in prompt else _merging(prompt)

    fuse = llm_fusion(model)
    result = evolve(numbered_tasks(8), lambda t, o: float("very" in o) * 0.5 + float("sources" in o) * 0.5,
                    run=lambda files, task: " ".join(files.values()), strategy=FileTree({"notes.md": "Be brief.\n"}),
                    propose=propose, rounds=1, n_workers=3,
                    policies=Policies(fusion=fuse))
    assert result.error is None and len(result.outcome_list) == 3
    assert len(asked) == len(set(asked))  # one call for each merge, however often the step asks
    assert fuse.stats["merged"] + fuse.stats["unreadable"] == len(asked) and fuse.stats["remembered"] >= 1


def test_a_merge_the_step_asks_in_each_of_three_folds_is_one_call(tmp_path):
    """A and B overlap; A wins unmeasured and C merges with it, B wins once measured and C now
    overlaps B: three folds, each asking the model to merge A and B."""
    asked = []
    fuse = llm_fusion(lambda prompt: asked.append(prompt) or "no")
    base = "l1\nl2\nl3\nl4\n"
    _, agg = make(tmp_path, {"doc": base}, policies=Policies(acceptance=BetaAcceptance(size=10), fusion=fuse))
    agg.verify_contested = True
    diffs = [diff("A", 1, {"doc": "fix1\nA\nl3\nl4\n"}, before={"doc": base}, tasks=["t1", "t3"]),
             diff("B", 1, {"doc": "l1\nfix2\nB\nl4\n"}, before={"doc": base}, tasks=["t2"]),
             diff("C", 1, {"doc": "l1\nl2\nl3\nfix5\n"}, before={"doc": base}, tasks=["t5"])]
    assert kinds(agg.step(diffs, step=0, sample=TASKS)) == {"A": "conflict_lost", "B": "committed", "C": "conflict_lost"}
    assert len(asked) == len(set(asked)) == 2
    assert fuse.stats == {"unreadable": 2, "remembered": 3}


def test_a_failed_call_is_remembered_and_not_paid_for_again():
    calls = []

    def failing(prompt):
        calls.append(prompt)
        raise AgentError("fuser: POST /v1/chat/completions: finish_reason 'length'")

    fuse = llm_fusion(failing)
    assert fuse("x\n", "y\n", "z\n") is False and fuse("x\n", "y\n", "z\n") is False
    assert len(calls) == 1 and fuse.stats == {"error": 1, "remembered": 1}


def test_the_memory_forgets_its_oldest_answers_past_its_entries_and_its_characters(monkeypatch):
    calls = []
    fuse = llm_fusion(lambda prompt: calls.append(prompt) or "<merged>merged</merged>")
    for i in range(fusion.MEMO_ENTRIES + 1):
        fuse("x\n", f"y{i}\n", f"z{i}\n")
    fuse("x\n", f"y{fusion.MEMO_ENTRIES}\n", f"z{fusion.MEMO_ENTRIES}\n")  # the newest: remembered
    fuse("x\n", "y0\n", "z0\n")  # the oldest: forgotten, asked again
    assert len(calls) == fusion.MEMO_ENTRIES + 2 and fuse.stats["remembered"] == 1

    monkeypatch.setattr(fusion, "MEMO_CHARS", len("merged\n") * 2)
    fuse = llm_fusion(lambda prompt: "<merged>merged</merged>")
    for i in [0, 1, 2, 2, 1, 0]:  # two merged texts fit: 0 went when 2 came
        fuse("x\n", f"y{i}\n", f"z{i}\n")
    assert fuse.stats == {"merged": 4, "remembered": 2}


def test_threads_share_one_memory_and_count_every_answer():
    fuse = llm_fusion(_merging)
    asks = [(f"y{i % 80}\n", f"z{i % 80}\n") for i in range(200)]

    def ask(mine):
        for ours, theirs in mine:
            assert fuse("x\n", ours, theirs) == "Be very brief; cite sources.\n"

    threads = [threading.Thread(target=ask, args=(asks[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(fuse.stats.values()) == len(asks) and fuse.stats["merged"] >= 80
    assert len(fuse._memo) == fusion.MEMO_ENTRIES


def test_the_policy_pickles_with_what_it_remembers_and_a_lock_of_its_own():
    fuse = llm_fusion(_merging)
    fuse("x\n", "y\n", "z\n")
    copy = pickle.loads(pickle.dumps(fuse))
    assert copy("x\n", "y\n", "z\n") == "Be very brief; cite sources.\n"
    assert copy.stats == {"merged": 1, "remembered": 1} and fuse.stats == Counter(merged=1)
    assert copy._lock is not fuse._lock and copy._memo is not fuse._memo


def test_a_text_holding_the_merged_tag_is_merged_whole():
    """The merged text ended at the first </merged>: a file that quotes the tag was cut there."""
    quoted = "Reply as <merged>text</merged>, then stop.\n"
    merged = quoted + "Be very brief; cite sources.\n"

    def model(prompt):  # answers in the block the prompt asks for, with the whole merged text
        tag = re.search(r"alone inside <(merged(?:-[0-9]+)?)>", prompt)[1]
        return f"<{tag}>\n{merged}</{tag}>"

    fuse = llm_fusion(model)
    assert fuse(quoted + "Be brief.\n", quoted + "Be very brief.\n", quoted + "Be brief; cite sources.\n") == merged
    assert fuse.stats == {"merged": 1}
