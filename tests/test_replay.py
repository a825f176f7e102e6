"""What a killed process paid for is neither lost from the bill nor paid for again: reflections and
a fusion model's merges are journalled, counted by the resumed run, and served to it once each;
calls that started and left no answer are counted from the start log; the step's own model calls
ask the budget first."""

from __future__ import annotations

import pytest

from agentdescent.agents.base import ModelUsage, before_each_call, metering
from agentdescent.agents.scripted import scripted
from agentdescent.engine.calls.budget import Allowance, BudgetSpent
from agentdescent.engine.persist.checkpoint import Checkpoint, RunFiles
from agentdescent.engine.persist.replay import JournaledFusion, asked
from agentdescent.types import Reflection, Rollout, Spend, Task
from agentdescent.usage import Usage

TASK = Task(id="t1", prompt="p")


def merge_with(model):
    return lambda base, ours, theirs: model(f"merge {ours} and {theirs}")


def test_a_fusion_a_model_made_is_journalled_counted_on_resume_and_served_once(tmp_path):
    model = scripted(lambda prompt: "merged")
    files = RunFiles(tmp_path)
    fusion = JournaledFusion(inner=merge_with(model), journal=files.record_answer, answers=files.replay)
    assert fusion("b", "o", "t") == "merged" and model.usage.calls == 1
    files.flush()

    later = RunFiles(tmp_path)  # the resumed process, from a checkpoint taken before the fusion
    usage = Usage()
    later.restore(Checkpoint(fingerprint="f", strategy="s"), usage, {})
    assert (usage.calls, usage.step_calls) == (1, 1) and usage.tokens == model.usage.tokens
    again = JournaledFusion(inner=merge_with(model), journal=later.record_answer, answers=later.replay)
    assert again("b", "o", "t") == "merged" and model.usage.calls == 1  # from the journal: not paid twice
    assert again("b", "o", "t") == "merged" and model.usage.calls == 2  # each answer served once


def test_a_fusion_that_called_no_model_is_not_journalled(tmp_path):
    files = RunFiles(tmp_path)
    fusion = JournaledFusion(inner=lambda base, ours, theirs: False, journal=files.record_answer, answers=files.replay)
    assert fusion("b", "o", "t") is False
    files.flush()
    assert not files.answers_path.exists()


def test_reflections_after_the_checkpoint_are_counted_and_served_and_lost_calls_are_counted(tmp_path):
    files = RunFiles(tmp_path)
    usage = Usage()
    failure = Rollout(task=TASK, output="wrong", reward=0.0)
    key = asked("view", [failure])
    for _ in range(5):  # five calls started: two answered and journalled, three cut off by the kill
        files.starts.mark()
    for proposal in ("rule a", "rule b"):
        usage.count_reflection(Reflection(proposal=proposal, spend=Spend(calls=1, input_tokens=10)),
                               journal=lambda r: files.record_answer(key, r))
    files.close()

    usage, saved = RunFiles(tmp_path).bill()  # what `status` reads of a run whose process is gone
    assert saved is None and (usage.calls, usage.proposals, usage.abandoned, usage.tokens) == (5, 2, 3, 20)
    later, resumed = RunFiles(tmp_path), Usage()
    later.restore(Checkpoint(fingerprint="f", strategy="s"), resumed, {})
    assert (resumed.calls, resumed.abandoned) == (5, 3)
    assert [later.replay.take(key).proposal for _ in range(2)] == ["rule a", "rule b"]
    assert later.replay.take(key) is None


def test_a_reflection_holding_a_lone_surrogate_is_journalled_and_read_back(tmp_path):
    files = RunFiles(tmp_path)
    files.record_answer("k", Reflection(proposal="bad \ud800 text"))
    files.close()
    assert [r.proposal for _, r in RunFiles(tmp_path).answers()] == ["bad \ud800 text"]


def test_the_steps_own_model_calls_ask_the_budget_before_they_start(tmp_path):
    model = scripted(lambda prompt: "ok")
    usage = Usage()
    allowance = Allowance(usage, max_calls=1, max_tokens=None)
    with metering(ModelUsage()) as meter, before_each_call(allowance.take):
        assert model("first") == "ok"
        with pytest.raises(BudgetSpent):
            model("second")  # refused before it starts: not made, not recorded
    assert model.usage.calls == meter.calls == 1


def test_a_merge_served_from_the_journal_is_remembered_by_llm_fusion_for_the_rest_of_the_step(tmp_path):
    """The step asks one merge more than once; llm_fusion answers the repeats from its memory. In a
    resumed run the first ask is the journal's, and the repeat was paid for again."""
    from agentdescent import llm_fusion

    model = scripted(lambda prompt: "<merged>both</merged>")
    files = RunFiles(tmp_path)
    fusion = JournaledFusion(inner=llm_fusion(model), journal=files.record_answer, answers=files.replay)
    assert fusion("b\n", "o\n", "t\n") == fusion("b\n", "o\n", "t\n") == "both\n" and model.usage.calls == 1
    files.flush()

    later = RunFiles(tmp_path)
    later.restore(Checkpoint(fingerprint="f", strategy="s"), Usage(), {})
    inner = llm_fusion(model)
    again = JournaledFusion(inner=inner, journal=later.record_answer, answers=later.replay)
    assert again("b\n", "o\n", "t\n") == again("b\n", "o\n", "t\n") == "both\n"
    assert model.usage.calls == 1 and inner.stats["remembered"] == 1
