"""A large folder target is named, stored and written without being held several times over: its
hash a JSON token at a time past a size, a result's rendering that is its state stored once, and a
long text encoded a block at a time. (Its cost in memory: bench/folder_memory.py.) Every file a
run reads can be changed by it: what a run reads of a file and what a change may leave in one are
one cap (`MAX_FILE_BYTES`), and a text or file past it that a run may change is refused up front."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from agentdescent import FileTree, SingleSlot, atomic, evolve
from agentdescent.artifacts.state import WHOLE_CHARS, state_hash
from agentdescent.errors import UserError
from agentdescent.governance import MAX_FILE_BYTES
from agentdescent.result import EvolveResult
from agentdescent.runs.build import materials
from agentdescent.runs.spec import read_spec
from tests import keyword_domain as domain
from tests.doubles import year_program
from tests.writeback_child import result_of

LARGE = {f"references/part-{n}.md": f"é {n} \ud800 " + "x" * (WHOLE_CHARS // 3) for n in range(4)}


def test_a_large_state_hashed_in_pieces_is_named_as_it_was_whole():
    whole = json.dumps(LARGE, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    assert state_hash(LARGE) == hashlib.sha256(whole).hexdigest()[:16]
    assert state_hash(dict(reversed(LARGE.items()))) == state_hash(LARGE)


def test_a_folders_result_keeps_its_rendering_once_and_reads_back_whole():
    tree = {"SKILL.md": "# s\n", "refs/a.md": "a" * 10_000}
    result = dataclasses.replace(result_of(tree, initial=tree), initial_rendered=tree)
    text = result.to_json()
    assert len(text) < 2.5 * 10_000 and json.loads(text)["same_as_state"] == ["rendered", "initial_rendered"]
    back = EvolveResult.from_json(text)
    assert back.rendered == back.state == tree and back.initial_rendered == back.initial_state == tree
    older = json.loads(text)  # written before renderings were kept once: both whole, no same_as_state
    older.update(rendered=tree, initial_rendered=tree)
    del older["same_as_state"]
    assert EvolveResult.from_json(json.dumps(older)).rendered == tree
    prompt = result_of("Be brief.\n", initial={"slot": "Be.\n"})
    assert EvolveResult.from_json(prompt.to_json()).rendered == "Be brief.\n"  # a text's rendering is its own


def test_a_long_text_is_written_whole_a_block_at_a_time(tmp_path):
    text = "é✓ line\n" * (3 * atomic._TEXT_BLOCK // 8)
    atomic.write_text(tmp_path / "big.md", text)
    assert (tmp_path / "big.md").read_bytes() == text.encode("utf-8")


def test_a_prompt_far_past_200_kb_is_changed_by_a_run():
    tasks, reward, run, propose = year_program()
    big = ("You are a careful support agent. " * 30 + "\n") * 300
    result = evolve(tasks, reward, run=run, propose=propose, strategy=SingleSlot(big, name="prompt.md"), rounds=1,
                    n_workers=1)
    assert result.outcomes().get("committed") == 1, result.outcome_list
    assert result.rendered == big + "always state the year\n"


def test_a_text_target_up_to_the_cap_is_read_and_one_past_it_refused_naming_file_size_and_cap(tmp_path):
    target = tmp_path / "prompt.md"
    target.write_text("x" * (MAX_FILE_BYTES - 1) + "\n", encoding="utf-8")
    spec = read_spec(domain.spec(tmp_path, strategy="single"))
    strategy = materials(spec).strategy
    assert strategy.initial_state()["prompt"] == target.read_text(encoding="utf-8") and strategy.names == {
        "prompt": "prompt.md"}  # a refused change names the file, not the key
    target.write_text("x" * MAX_FILE_BYTES + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"prompt\.md' holds 1,000,001 bytes, over the 1,000,000 bytes a text target "
                                        r"may hold; give a smaller file"):
        materials(spec)


def test_evolve_refuses_up_front_a_text_or_a_file_it_may_change_but_no_change_could_be_made_to():
    tasks, reward, run, propose = year_program()
    with pytest.raises(UserError) as refused:
        evolve(tasks, reward, run=run, propose=propose, strategy=SingleSlot("x" * (MAX_FILE_BYTES + 1), name="prompt.md"))
    said = str(refused.value)
    assert "no change could be made to 'prompt.md' (1,000,001 bytes): over the 1,000,000 bytes one file may hold" in said
    assert "start from a smaller text" in said and "AppendRules.under(text)" in said
    tree = {"SKILL.md": "# skill\n", "references/big.md": "y" * (MAX_FILE_BYTES + 1)}
    with pytest.raises(UserError, match=r"'references/big\.md' \(1,000,001 bytes\).*leave it out of the run "
                                        r"\(load_tree\(\.\.\., exclude=\[\.\.\.\]\)\), freeze it"):
        evolve(tasks, reward, run=run, propose=propose, strategy=FileTree(tree))
    frozen = evolve(tasks, reward, run=run, propose=propose, strategy=FileTree(tree, frozen=["references/*"]), rounds=1)
    assert frozen.error is None and frozen.state["references/big.md"] == tree["references/big.md"]
