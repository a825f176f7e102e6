"""Reflectors and LLM fusion, against scripted models that answer the way real ones do."""

from __future__ import annotations

import functools
import gc
import pickle
import re
import warnings

import pytest

from agentdescent import FileTree, Policies, SingleSlot, Task, evolve, llm_judge
from agentdescent.agents import claude, openai_compatible, scripted
from agentdescent.artifacts.strategies import InvalidProposal
from agentdescent.errors import UserError
from agentdescent.reflect import llm_fusion, parse_rule, reflector, tree_reflector, unwrap
from agentdescent.types import Rollout
from tests.doubles import echo, numbered_tasks
from tests.loopback import LoopbackServer, Response, anthropic_messages, openai_chat

TASK = Task(id="t1", prompt="What is 6 x 7?", gold="42")


@pytest.mark.parametrize("reply, rule", [
    ("<rule>Give only the number.</rule>", "Give only the number."),
    ("Looking at the failure...\n<rule>\n  Give only the number.\n</rule>\nHope this helps!", "Give only the number."),
    ("```\nGive only the number.\n```", "Give only the number."),
    ('"Give only the number."', "Give only the number."),
    ("**Rule:** give only the number.", "give only the number."),
    ("1. Give only the number.", "Give only the number."),
    ("NONE", None),
    ("<rule>none</rule>", None),
    ("No rule.", None),
])
def test_rules_are_read_out_of_real_looking_replies(reply, rule):
    assert parse_rule(reply) == rule


@pytest.mark.parametrize("reply", ["<rule>Always answer with the number", "<rule>Be brief.</rule> Also: <rule>Always answer",
                                   "<RULE>none"])
def test_a_rule_tag_nothing_closes_is_a_reply_cut_off_and_unreadable(reply):
    with pytest.raises(ValueError, match="never closes: it was cut off"):
        parse_rule(reply)


def test_where_the_prompt_asked_for_tags_a_reply_without_them_is_read_only_for_a_rule_line_or_none():
    refusal = "I'm sorry, but I can't help with that."
    with pytest.raises(ValueError, match="no <rule> tag, which the prompt asked for"):
        parse_rule(refusal, tags_asked=True)
    assert parse_rule("**Rule:** give only the number.", tags_asked=True) == "give only the number."
    assert parse_rule("NONE", tags_asked=True) is None and parse_rule("<rule>Be brief.</rule>", tags_asked=True) == "Be brief."
    with pytest.raises(ValueError, match="the reply is a refusal, not a rule"):
        parse_rule(refusal)  # asked for no tags, the reply is read as it stands: a refusal still tells no habit


@pytest.mark.usefixtures("no_provider_env")
@pytest.mark.parametrize("reply", ["I'm sorry, but I can't help with that.", "<rule>Always answer with the number"])
def test_a_refusal_or_a_cut_rule_is_no_proposal_however_much_any_rule_would_help(monkeypatch, reply):
    """Both were proposed as rules ("<rule>" and all), passed the acceptance test (any instructions
    at all helped this agent) and were committed."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-refusal-0123456789")
    with LoopbackServer(openai_chat(lambda prompt: reply)) as server:
        propose = reflector(openai_compatible("gpt-test", base_url=server.url + "/v1"))
        result = evolve(numbered_tasks(10, gold="2"), lambda t, o: float(o == "2"),
                        run=lambda rendered, t: "2" if rendered.strip() else "1", propose=propose,
                        strategy=SingleSlot(""), rounds=1, n_workers=2)
    assert result.rendered == "" and "committed" not in result.outcomes()
    assert propose.stats["unreadable"] >= 1 and "rules" not in propose.stats


def test_a_template_of_ones_own_that_asks_for_no_tags_has_the_reply_read_as_the_rule():
    plain = reflector(scripted(["Give only the number."]), instructions="{artifact}\n{cases}\nReply with one rule.")
    assert plain("", TASK, "x", 0.0) == "Give only the number."
    tagged_asked = reflector(scripted(["Give only the number."]))
    with pytest.raises(InvalidProposal, match="no <rule> tag, which the prompt asked for"):
        tagged_asked("", TASK, "x", 0.0)
    assert tagged_asked.stats == {"unreadable": 1}


def test_prose_without_a_rule_is_unreadable():
    with pytest.raises(ValueError):
        parse_rule("The assistant was verbose.\nIt explained too much.\nMaybe shorter answers?")


def test_a_reply_over_the_cap_is_not_parsed():
    with pytest.raises(ValueError, match="at most 200,000 are read"):
        parse_rule("<rule>Be brief.</rule>" + " " * 200_000)


@pytest.mark.parametrize("reply, reason", [
    ("<rule>Be brief.</rule>" + " " * 200_000, "200,022 characters; at most 200,000"),
    ("<rule>Be brief.\ud800</rule>", "not valid Unicode"),
    ("<rule>Be\x00 brief.</rule>", "U\\+0000"),
])
def test_reflector_counts_a_reply_it_refuses_at_the_door_as_unreadable_with_the_reason(reply, reason):
    propose = reflector(scripted([reply]))
    with pytest.raises(InvalidProposal, match=reason):
        propose("", TASK, "x", 0.0)
    assert propose.stats == {"unreadable": 1}


def test_unwrap_worked_example():
    assert unwrap('**"Be brief."**') == "Be brief."


def test_reflector_shows_artifact_task_output_gold_and_reward():
    seen = []
    model = scripted(lambda prompt: seen.append(prompt) or "<rule>Give only the number.</rule>")
    propose = reflector(model)
    assert propose("- be polite", TASK, "It is forty-two, I think", 0.0) == "Give only the number."
    prompt = seen[0]
    for part in ("- be polite", "What is 6 x 7?", "It is forty-two, I think", "42", "0.00"):
        assert part in prompt
    assert propose.stats == {"rules": 1}


def test_reflector_counts_empty_none_garbage_and_rules():
    replies = ["", "NONE", "Well.\nHard to say.\nMaybe?", "<rule>Be exact.</rule>"]
    propose = reflector(scripted(replies))
    got = [propose("", TASK, "x", 0.0) for _ in replies[:2]]
    with pytest.raises(InvalidProposal, match="no <rule> tag"):
        propose("", TASK, "x", 0.0)
    assert got == [None, None] and propose("", TASK, "x", 0.0) == "Be exact."
    assert propose.stats == {"empty": 1, "none": 1, "unreadable": 1, "rules": 1}


@pytest.mark.parametrize("reply, reason", [
    ('```json\n{"rule": "Cite the source."}\n```', "no <rule> tag, which the prompt asked for"),
    ("I'm sorry, but I can't help with that.", "no <rule> tag, which the prompt asked for"),
    ("<rule>Cite the source. " + "Also be careful. " * 100 + "</rule>", "longer than 1000 characters"),
    ("<rule>Always answer with the number", "cut off"),
])
def test_an_unreadable_reply_is_an_invalid_proposal_that_says_why_and_how_it_begins(reply, reason):
    """It was None, counted but said nowhere: a run whose every reply was unreadable finished with
    no outcome at all, its journal holding no reason."""
    propose = reflector(scripted([reply]))
    with pytest.raises(InvalidProposal, match=re.escape(reason)) as caught:
        propose("", TASK, "x", 0.0)
    assert "cannot be read as a rule" in str(caught.value) and f"(it begins «{reply[:6]}" in str(caught.value)
    assert propose.stats == {"unreadable": 1}


@pytest.mark.parametrize("reply", [
    "<rule>**Rule:** Cite the source.</rule>",
    "<rule>Rule: Cite the source.</rule>",
    "<rule>**New rule**: Cite the source.</rule>",
    '<rule>Proposed rule - "Cite the source."</rule>',
    "<rule>\n## Rule\nCite the source.\n</rule>",
    "<rule>**Rule**\nCite the source.</rule>",
    "<rule>### Cite the source.</rule>",
    "<rule>- Rule: Cite the source.</rule>",
])
def test_a_label_or_a_heading_inside_the_tag_is_no_part_of_the_rule(reply):
    """They were committed: "- Rule:** Cite the source.", "- ## Rule Cite the source."."""
    assert parse_rule(reply, tags_asked=True) == "Cite the source."


@pytest.mark.parametrize("rule", ["Rule out the impossible answers first.", "Rule-based checks come first.",
                                  "None of the steps may be skipped.", "Before answering, check:\n- the units\n- the sign"])
def test_a_rule_that_merely_begins_like_a_label_or_none_or_holds_a_list_is_kept(rule):
    assert parse_rule(f"<rule>{rule}</rule>") == " ".join(rule.split())


@pytest.mark.parametrize("reply, rules", [
    ("<rule>1. Cite the source.\n2. Be brief.\n3. Show your work.</rule>", 3),
    ("<rule>\nRules:\n- Cite the source.\n- Be brief.\n</rule>", 2),
    ("<rule>Rule 1: Cite the source.\nRule 2: Be brief.</rule>", 2),
])
def test_a_list_of_rules_inside_the_tag_is_refused_not_squashed_into_one(reply, rules):
    with pytest.raises(ValueError, match=f"a list of {rules} rules; the prompt asks for one rule per reply"):
        parse_rule(reply)


@pytest.mark.parametrize("reply", [
    "<rule>NONE - the answer was already correct.</rule>", "<rule>NONE</rule>", "NONE — the answer was already correct.",
    "NONE. The answer was already correct.", "NONE\n\nThe answer was already correct.", "**NONE**: it was right.",
    "<rule>No rule needed; the answer was correct.</rule>", "(none)", "Rule: N/A, it was right",
])
def test_none_with_or_without_why_is_no_proposal(reply):
    propose = reflector(scripted([reply]))
    assert parse_rule(reply, tags_asked=True) is None and propose("", TASK, "x", 0.0) is None
    assert propose.stats == {"none": 1}


@pytest.mark.parametrize("reply", ["<rule>I'm sorry, but I can't help with that.</rule>",
                                   "<rule>I’m unable to suggest a rule here.</rule>", "Rule: I cannot help with that."])
def test_a_refusal_inside_the_tags_is_no_rule(reply):
    """It was committed as the rule, and paid for."""
    propose = reflector(scripted([reply]))
    with pytest.raises(InvalidProposal, match="is a refusal, not a rule"):
        propose("", TASK, "x", 0.0)
    assert propose.stats == {"unreadable": 1}


@pytest.mark.parametrize("reply", ["<rule>...</rule>", "<rule>\u2026</rule>", "<rule>[...]</rule>", "Rule: ---"])
def test_a_rule_of_no_words_is_a_placeholder_not_a_rule(reply):
    """The prompt's form echoed with nothing in it was committed as the rule "...", and paid for."""
    propose = reflector(scripted([reply]))
    with pytest.raises(InvalidProposal, match="holds no words .*: a placeholder, not a rule"):
        propose("", TASK, "x", 0.0)
    assert propose.stats == {"unreadable": 1}


def be_exact(prompt: str) -> str:
    return "<rule>Be exact.</rule>"


def test_a_reflector_sent_to_another_process_reflects_there_and_counts_its_own_stats():
    """The process and Ray executors pickle propose: the reflector's lock made every such run fail."""
    propose = reflector(scripted(be_exact), batch=True)
    propose("", TASK, "x", 0.0)
    copy = pickle.loads(pickle.dumps(propose))
    assert copy.batch("", [Rollout(task=TASK, output="x", reward=0.0)]) == "Be exact."
    assert copy.stats == {"rules": 2} and propose.stats == {"rules": 1}


def test_batch_reflection_sees_every_failure_and_makes_one_rule():
    seen = []
    propose = reflector(scripted(lambda p: seen.append(p) or "<rule>Show units.</rule>"), batch=True)
    rollouts = [Rollout(task=Task(id=f"t{i}", prompt=f"question {i}", gold=str(i)), output="?", reward=0.0)
                for i in range(3)]
    assert propose.batch("", rollouts) == "Show units."
    assert len(seen) == 1 and all(f"question {i}" in seen[0] for i in range(3))


def test_batch_reflector_drives_one_proposal_per_worker_in_evolve():
    tasks = numbered_tasks(12, gold="ok")
    model = scripted(lambda p: "<rule>Say ok.</rule>")
    result = evolve(tasks, lambda t, o: float(o == "ok"), run=lambda r, t: "ok" if "Say ok" in r else "no",
                    propose=reflector(model, batch=True), rounds=2, n_workers=3)
    assert result.final_reward == 1.0
    first_round = result.history[0]
    assert len(first_round.diffs) == 3  # one per worker, not one per failure
    assert model.usage.calls == 3
    assert result.usage.model.calls == 3  # the run's meter saw the reflector's calls


TREE = {"SKILL.md": "# Skill\nAnswer questions.\n", "hooks/check.sh": "exit 0\n", "notes.md": "n\n"}


def tree_strategy():
    return FileTree(TREE, max_files_per_diff=1, frozen=["hooks/*"])


def test_tree_reflector_returns_clean_validated_blocks():
    reply = 'Here you go:\n<file path="SKILL.md">\n```markdown\n# Skill\nAnswer with a number only.\n```\n</file>'
    propose = tree_reflector(scripted([reply]), strategy=tree_strategy())
    proposal = propose(TREE, TASK, "forty-two", 0.0)
    assert proposal == '<file path="SKILL.md">\n# Skill\nAnswer with a number only.\n</file>'
    edits = tree_strategy().edits_for(TREE, proposal)
    assert [(e.key, e.after) for e in edits] == [("SKILL.md", "# Skill\nAnswer with a number only.\n")]
    named = tree_reflector(scripted(['<file path="./SKILL.md">\n# Skill\n</file>']), strategy=tree_strategy())
    assert named(TREE, TASK, "x", 0.0) == '<file path="SKILL.md">\n# Skill\n</file>'  # the file the folder has


@pytest.mark.parametrize("reply, reason", [
    ('<file path="hooks/check.sh">rm -rf /\n</file>', "frozen"),
    ('<file path="./hooks/check.sh">rm -rf /\n</file>', "frozen"),  # read as the frozen file it names
    ('<file path=".claude/skills/s/hooks/check.sh">rm -rf /\n</file>', "frozen"),
    ('<file path="SKILL.md">\n# Skill\n[rest of the file unchanged]\n</file>', "leaves part of SKILL.md out"),
    ('<file path="notes.md">\n...\nn2\n</file>', "leaves part of notes.md out"),
    ('<file path="SKILL.md">a\n</file><file path="notes.md">b\n</file>', "at most 1 per diff"),
    ('<file path="../outside.md">x\n</file>', ".."),
    ("I would change the skill to be more precise.", "no <file"),
    ('<file path="SKILL.md">\n# Skill\nAnswer que', "block of SKILL.md has no </file>: the reply was cut off"),
    ('<file path="notes.md">\nn\n</file>\n<file path="SKILL.md">\n# Sk', "only part of the change; none of it is used"),
    ('<file path="SKILL.md">' + "x" * 1_000_001 + "</file>", "over the 1,000,000 one file may hold"),  # admission's cap
    ('<file path="SKILL.md">' + "x" * 2_000_000 + "</file>", "at most 2,000,000 are read"),  # the reply's cap
    ('<file path="SKILL.md">a\ud800\n</file>', "not valid Unicode"),
    ('<file path="SKILL.md">a\x00\n</file>', "U\\+0000"),
    ('<file path="SKILL.md">a\x1b[31m\n</file>', "control character U\\+001B"),  # admission's rule, applied here
])
def test_tree_reflector_refuses_what_the_strategy_forbids(reply, reason):
    propose = tree_reflector(scripted([reply]), strategy=tree_strategy())
    with pytest.raises(InvalidProposal, match=reason):
        propose(TREE, TASK, "x", 0.0)
    assert propose.stats == {"invalid": 1}


def test_a_file_that_is_one_fenced_block_keeps_its_fence():
    tree = {**TREE, "example.md": "```json\n{}\n```\n"}
    propose = tree_reflector(scripted(['<file path="example.md">\n```json\n{"a": 1}\n```\n</file>']),
                             strategy=FileTree(tree, frozen=["hooks/*"]))
    assert propose(tree, TASK, "x", 0.0) == '<file path="example.md">\n```json\n{"a": 1}\n```\n</file>'


def test_a_line_that_reads_as_an_elision_passes_where_the_file_already_had_it():
    tree = {**TREE, "notes.md": "Steps:\n...\n"}
    propose = tree_reflector(scripted(['<file path="notes.md">\nSteps:\n...\nAsk first.\n</file>']),
                             strategy=FileTree(tree, frozen=["hooks/*"]))
    assert propose(tree, TASK, "x", 0.0) == '<file path="notes.md">\nSteps:\n...\nAsk first.\n</file>'


def test_tree_reflector_prompt_names_editable_and_frozen_files():
    seen = []
    propose = tree_reflector(scripted(lambda p: seen.append(p) or "NONE"), strategy=tree_strategy())
    assert propose(TREE, TASK, "x", 0.0) is None
    assert "Files you may change: SKILL.md, notes.md" in seen[0]
    assert "Files you must not change: hooks/check.sh" in seen[0]
    assert "at most 1 file" in seen[0]


@pytest.mark.parametrize("make", [lambda model: reflector(model, apart=True),
                                  lambda model: tree_reflector(model, strategy=tree_strategy(), apart=True)])
def test_a_reflector_apart_gives_the_artifact_beside_the_prompt_as_its_context(make):
    asked: list[tuple[str, str]] = []

    def host(prompt: str, *, context: str) -> str:  # a host that reads each candidate's artifact once
        asked.append((prompt, context))
        return "NONE"

    assert make(host)(TREE, TASK, "x", 0.0) is None
    [(prompt, context)] = asked
    assert "Answer questions." in context and "Answer questions." not in prompt
    assert "beside this prompt" in prompt and TASK.prompt in prompt


def test_invalid_tree_replies_become_invalid_outcomes_in_evolve():
    tasks = numbered_tasks(8)
    propose = tree_reflector(scripted(lambda p: '<file path="hooks/check.sh">x\n</file>'), strategy=tree_strategy())
    result = evolve(tasks, lambda t, o: 0.0, run=lambda r, t: "", propose=propose, strategy=tree_strategy(),
                    rounds=1, n_workers=2)
    assert set(result.outcomes()) == {"invalid"}
    assert "frozen" in result.outcome_list[0].reason


def test_llm_fusion_merges_what_git_cannot_and_keeps_git_merges():
    calls = []
    fuse = llm_fusion(scripted(lambda p: calls.append(p) or "<merged>Be brief and cite sources.</merged>"))
    assert fuse("a\nb\nc\n", "A\nb\nc\n", "a\nb\nC\n") == "A\nb\nC\n"  # git merges it: no model call
    assert calls == []
    assert fuse("Be brief.\n", "Be very brief.\n", "Be brief; cite sources.\n") == "Be brief and cite sources.\n"
    assert "Be very brief." in calls[0] and "cite sources" in calls[0]


def test_llm_fusion_leaves_a_conflict_when_the_reply_is_unreadable():
    fuse = llm_fusion(scripted(["I cannot merge these."]))
    assert fuse("x\n", "y\n", "z\n") is False
    assert fuse.stats == {"unreadable": 1}


@pytest.mark.parametrize("reply", [
    "<merged>y</merged>" + " " * 2_000_000, "<merged>y\ud800</merged>", "<merged>y\x00</merged>", "<merged>y\x1b</merged>",
])
def test_llm_fusion_leaves_a_conflict_when_the_reply_or_its_text_cannot_be_stored(reply):
    fuse = llm_fusion(scripted([reply]))
    assert fuse("x\n", "y\n", "z\n") is False
    assert fuse.stats == {"unreadable": 1}


def test_llm_fusion_in_the_aggregator_turns_a_conflict_into_a_fused_commit():
    tasks = numbered_tasks(12)
    replies = iter(["Be brief.", "Be exact."])
    fuser = scripted(lambda p: "<merged>Be brief.\nBe exact.</merged>")
    result = evolve(
        tasks, lambda t, o: float("brief" in o) * 0.5 + float("exact" in o) * 0.5, run=echo,
        propose=lambda *a: next(replies, None), strategy=SingleSlot(""), rounds=1, n_workers=2,
        policies=Policies(fusion=llm_fusion(fuser)),
    )
    assert result.outcomes() == {"fused": 2}
    assert fuser.usage.calls >= 1 and result.usage.model.calls == fuser.usage.calls  # the step's own calls count
    assert "Be brief." in result.rendered and "Be exact." in result.rendered


@pytest.mark.usefixtures("no_provider_env")
@pytest.mark.parametrize("failure, said", [
    (Response(status=401, body={"error": {"message": "Incorrect API key provided"}}), "HTTP 401"),
    (Response(body={"choices": [{"index": 0, "finish_reason": "length",
                                 "message": {"role": "assistant", "content": "<merged>Be brief.\nBe"}}]}),
     "finish_reason 'length'"),
])
def test_a_fusion_model_call_that_fails_leaves_the_edits_in_conflict_and_the_run_goes_on(monkeypatch, caplog, failure, said):
    """The model's `AgentError` escaped `evolve` from inside the step: no result, the run over."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fusion-0123456789")
    replies = iter(["Be brief.", "Be exact."])
    with LoopbackServer(openai_chat(lambda prompt: failure)) as server:
        fuse = llm_fusion(openai_compatible("fuser", base_url=server.url + "/v1", backoff=(0.001, 0.005)))
        result = evolve(numbered_tasks(12), lambda t, o: float("brief" in o) * 0.5 + float("exact" in o) * 0.5, run=echo,
                        propose=lambda *a: next(replies, None), strategy=SingleSlot(""), rounds=1, n_workers=2,
                        policies=Policies(fusion=fuse))
    assert result.error is None and "fused" not in result.outcomes() and server.requests
    assert fuse.stats["error"] == len(server.requests) and "merged" not in fuse.stats
    assert result.usage.model.failures == len(server.requests)  # the step's own calls, failed ones too
    assert "llm_fusion: the model call failed, so the edits stay in conflict: fuser: POST" in caplog.text and said in caplog.text


@pytest.mark.usefixtures("no_provider_env")
@pytest.mark.parametrize("stop", ["model_context_window_exceeded", "pause_turn"])
def test_a_whole_looking_rule_claude_did_not_finish_is_not_proposed(monkeypatch, stop):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-unfinished")
    unfinished = {"content": [{"type": "text", "text": "<rule>Say ok.</rule>"}], "stop_reason": stop,
                  "usage": {"input_tokens": 10, "output_tokens": 5}}
    with LoopbackServer(anthropic_messages(lambda prompt: Response(body=unfinished))) as server:
        result = evolve(numbered_tasks(12, gold="ok"), lambda t, o: float(o == "ok"),
                        run=lambda r, t: "ok" if "Say ok" in r else "no",
                        propose=reflector(claude("claude-test", base_url=server.url)), rounds=1, n_workers=2,
                        strategy=SingleSlot(""))
    assert result.state == {"prompt": ""} and set(result.outcomes()) == {"error"}
    assert all(f"stop_reason '{stop}'" in o.reason for o in result.outcome_list)


@pytest.mark.usefixtures("no_provider_env")
def test_a_rule_cut_at_the_reflector_s_output_limit_is_not_proposed(monkeypatch):
    """The server stops the reply at max_tokens: "<rule>Say ok, ..." read as a rule would be a
    cut one (here one that even passes). It is an `error` outcome saying what to raise instead."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-cut")
    reply = "<rule>Say ok, and only ok, whatever the question asks.</rule>"
    tasks = numbered_tasks(12, gold="ok")

    def run(max_tokens):
        return evolve(tasks, lambda t, o: float(o == "ok"), run=lambda r, t: "ok" if "Say ok" in r else "no",
                      propose=reflector(claude("claude-test", base_url=server.url, max_tokens=max_tokens)),
                      rounds=1, n_workers=2, strategy=SingleSlot(""))

    with LoopbackServer(anthropic_messages(lambda prompt: reply)) as server:
        cut, whole = run(3), run(64)
    assert cut.final_reward == 0.0 and cut.state == {"prompt": ""}
    reasons = [o.reason for o in cut.outcome_list]
    assert reasons and all("stop_reason 'max_tokens' (max_tokens=3)" in r and "raise it with max_tokens=6" in r
                           for r in reasons)
    assert whole.final_reward == 1.0 and "Say ok, and only ok" in whole.state["prompt"]


class _Reply:
    """A client's reply object, whose text is an attribute."""

    def __init__(self) -> None:
        self.content = "<rule>Give only the number.</rule>"


async def _async_model(prompt, **options):
    return "<rule>Give only the number.</rule>"


class _AsyncCallable:
    async def __call__(self, prompt, **options):
        return "<rule>Give only the number.</rule>"


def _asked(make, model):
    """What asking `model` through the wrapper `make` names raises, with the warnings it left."""
    propose = {"reflector()": lambda: reflector(model),
               "tree_reflector()": lambda: tree_reflector(model, strategy=FileTree({"a.md": "x\n"})),
               "llm_fusion()": lambda: llm_fusion(model),
               "llm_judge()": lambda: llm_judge(model, "says the year")}[make]()
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        with pytest.raises(UserError) as raised:
            if make == "llm_fusion()":
                propose("x\n", "y\n", "z\n")
            else:
                propose({"a.md": "x\n"} if make == "tree_reflector()" else "Be brief.", TASK, "41", 0.0)
        message = str(raised.value)
        del raised  # its traceback holds the reply: a coroutine left open warns once it is collected
        gc.collect()
    return message, [str(w.message) for w in heard]


@pytest.mark.parametrize("make", ["reflector()", "tree_reflector()", "llm_fusion()"])
@pytest.mark.parametrize("returns, said", [
    (None, "returned None; it must return the reply as text (a return missing?)"),
    ({"content": [{"text": "<rule>Be brief.</rule>"}]}, "returned dict; it must return the reply as a str (a client's raw "
                                                       "response: the text inside it)"),
    (b"<rule>Be brief.</rule>", "returned bytes; it must return the reply as text (decode it with .decode())"),
    (_Reply(), "returned a _Reply object, which has no text of its own (its str() is '<... object at 0x...>'); it must "
               "return the reply as text (a client's reply object: its .text or .content, say)"),
    (5, "returned int; it must return the reply as a str"),
])
def test_a_model_reply_that_is_not_text_is_named_with_the_fix(make, returns, said):
    """It failed deep in the parser ("object of type 'Reply' has no len()"), as if the reflector had
    a bug; the judge and fusion took its str() for the reply."""
    message, _ = _asked(make, lambda prompt, **options: returns)
    assert message == f"the model given to {make} {said}"


@pytest.mark.parametrize("make", ["reflector()", "tree_reflector()", "llm_fusion()", "llm_judge()"])
@pytest.mark.parametrize("model", [_async_model, _AsyncCallable(), functools.partial(_async_model, context="")])
def test_an_async_model_is_refused_where_it_is_given_before_any_run(make, model):
    with pytest.raises(UserError, match=re.escape(f"{make[:-2]}'s model is an async function; it is called from worker "
                                                  "threads, which need the answer itself: give a plain function")):
        _asked(make, model)


@pytest.mark.parametrize("make", ["reflector()", "tree_reflector()", "llm_fusion()"])
def test_an_async_model_behind_a_lambda_is_told_to_be_a_plain_function_and_its_coroutine_is_closed(make):
    message, heard = _asked(make, lambda prompt, **options: _async_model(prompt, **options))
    assert message.startswith(f"the model given to {make} returned coroutine, not the reply: an async or generator "
                              "function (or a callable object with one) was given; give a plain function")
    assert [m for m in heard if "never awaited" in m] == []
