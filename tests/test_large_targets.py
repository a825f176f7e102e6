"""A large folder target is named, stored and written without being held several times over: its
hash a JSON token at a time past a size, a result's rendering that is its state stored once, and a
long text encoded a block at a time. (Its cost in memory: bench/folder_memory.py.)"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from agentdescent import atomic
from agentdescent.artifacts.state import WHOLE_CHARS, state_hash
from agentdescent.result import EvolveResult
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
