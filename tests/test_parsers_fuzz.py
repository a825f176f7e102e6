"""Every reader of model output, fuzzed with hypothesis: the file-block and rule readers, the
reflectors, LLM fusion and the three-way merge.

What must hold on any text, lone surrogates, NUL and control codes included: no exception but the
documented ones (`InvalidProposal`, and `ValueError` from `parse_rule`); the paths that come out
are exactly what stood between the tags, and any text comes back whole from its block; no unsafe
path survives the tree reflector; the readers agree with regexes (the rule readers with those they
replaced) wherever those finish; the merge agrees with `git merge-file`;
and time grows linearly with the input (`test_*_is_linear`). Set AGENTDESCENT_FUZZ_EXAMPLES to fuzz
harder than CI does.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentdescent.agents import scripted
from agentdescent.artifacts.fileblocks import file_block, files_of, misread, parse_file_blocks
from agentdescent.artifacts.strategies import (
    MAX_PROPOSAL_CHARS,
    AppendRules,
    FileTree,
    InvalidProposal,
    KeyedRules,
    SingleSlot,
    text_refusal,
)
from agentdescent.governance import Governance, unsafe_key_reason
from agentdescent.reflect import llm_fusion, parse_rule, reflector, tagged, tree_reflector, unwrap
from agentdescent.step.policies import ThreeWayMerge
from agentdescent.step.textmerge import merge_text
from agentdescent.types import Edit, Task

reflector_module = importlib.import_module("agentdescent.reflect.reflector")  # the package exports `reflector`, the function
tree_module = importlib.import_module("agentdescent.reflect.tree_reflector")

EXAMPLES = int(os.environ.get("AGENTDESCENT_FUZZ_EXAMPLES", "150"))
# No example database: CI starts clean each time, and a failure prints its example anyway.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

TASK = Task(id="t1", prompt="What is 6 x 7?", gold="42")
TREE = {"SKILL.md": "# Skill\n", "hooks/check.sh": "exit 0\n", "notes.md": "n\n"}

# The pieces replies are built from: every tag the readers look for, broken halves of them, and
# the characters that break naive text handling.
FRAGMENTS = [
    '<file path="', '">', "</file>", '<delete path="', '"/>', '" />', '"', "<", ">", "/", '<file-1 path="', "</file-1>",
    "<rule>", "</rule>", "<RULE>", "</Rule>", "<merged>", "</merged>", "rule", "Rule 2:", ":",
    "```", "```py\n", "`", "\n", " ", "\t", "\r\n", "- ", "1. ", "**", "NONE", "none",
    "SKILL.md", "notes.md", "hooks/check.sh", "../up.md", "/abs.md", "a/./b.md", "CON.md", "a:b", ".git/x",
    "\x00", "\x1b[31m", "\x7f", "\x85", "\x9b", "\U000e0041", "\u2028", "\ufeff", "\ud800", "\udfff", "\ud83d", "é", "😀",
]
fragment = st.sampled_from(FRAGMENTS)
any_char = st.characters(codec=None, exclude_categories=())
pieces = st.one_of(fragment, fragment, st.text(any_char, max_size=6),
                   st.tuples(fragment, st.integers(1, 300)).map(lambda pair: pair[0] * pair[1]))
replies = st.lists(pieces, max_size=30).map("".join)
small_replies = st.lists(st.one_of(fragment, st.text(any_char, max_size=3)), max_size=12).map("".join)


# --- the regexes the readers replaced: the reference on inputs small enough for them ------------

# The file-block reader as one regex: a block or a delete tag, leftmost first; a block's text is
# everything to its own closing tag (a delete tag there is text), or to the end when none follows.
FILE_BLOCK_OR_DELETE = re.compile(r'<(file(?:-[0-9]+)?) path="([^"]+)">\n?(.*?)(</\1>|\Z)|<delete path="([^"]+)"\s*/>',
                                  re.DOTALL)
OLD_CODE_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```\s*$", re.DOTALL)
OLD_RULE_LINE = re.compile(r"\brule\s*\d*\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def regex_parse_file_blocks(proposal: str) -> dict[str, str | None]:
    files: dict[str, str | None] = {}
    deleted = []
    for found in FILE_BLOCK_OR_DELETE.finditer(proposal):
        if found[1] and not found[4]:
            break  # a block cut off: the rest is its text
        if found[1]:
            files[found[2]] = found[3]
        else:
            deleted.append(found[5])
    files.update((p, None) for p in deleted)
    return files


def old_tagged(reply: str, tag: str) -> str | None:
    found = re.findall(rf"<{tag}>\s*(.*?)\s*</{tag}>", reply, re.DOTALL | re.IGNORECASE)
    return found[-1] if found else None


def old_unwrap(text: str) -> str:
    text = text.strip()
    fenced = OLD_CODE_FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    text = re.sub(r"^(?:[-*•]|\d+[.)])\s+", "", text)
    for _ in range(3):
        stripped = text.strip().strip("*_`").strip().strip("\"'“”‘’").strip()
        if stripped == text:
            break
        text = stripped
    return text


def old_parse_rule(reply: str) -> str | None:
    if re.search(r"<rule>(?!.*</rule>)", reply, re.DOTALL | re.IGNORECASE):  # a block cut off
        raise ValueError("unclosed")
    body = old_tagged(reply, "rule")
    if body is None:
        lines = OLD_RULE_LINE.findall(reply)
        body = lines[-1] if lines else reply
    rule = old_unwrap(body)
    if not rule or reflector_module.NONE_REPLY.match(rule):
        return None
    if "\n" in rule.strip() and body is reply:
        raise ValueError("prose")
    if len(rule) > reflector_module.MAX_RULE_CHARS:
        raise ValueError("long")
    return " ".join(rule.split())


def outcome(fn: Callable[[], object]) -> object:
    """What `fn` returns, or the ValueError it raises (as a marker), for comparing two readers."""
    try:
        return fn()
    except ValueError:
        return ValueError


# --- the file-block reader -------------------------------------------------------------------


@FUZZ
@given(small_replies)
def test_parse_file_blocks_agrees_with_a_regex_reading(reply):
    assert list(parse_file_blocks(reply).items()) == list(regex_parse_file_blocks(reply).items())


@FUZZ
@given(replies, replies)
def test_any_text_reads_back_whole_from_its_block(text, other):
    shown = {"a.md": text, "b.md": other}
    blocks = file_block("a.md", text) + "\n" + file_block("b.md", other)
    assert parse_file_blocks(blocks) == shown and misread(blocks, shown) is None


@FUZZ
@given(replies)
def test_parsed_paths_and_texts_are_exactly_what_stood_between_the_tags(reply):
    for path, text in parse_file_blocks(reply).items():
        assert path and '"' not in path
        if text is None:
            assert re.search(rf'<delete path="{re.escape(path)}"\s*/>', reply)
        else:
            tags = set(re.findall(r"<(file(?:-[0-9]+)?) path=", reply))
            assert any(f'<{tag} path="{path}">{newline}{text}</{tag}>' in reply and f"</{tag}>" not in text
                       for tag in tags for newline in ("", "\n"))


@FUZZ
@given(replies)
def test_file_tree_edits_for_raises_nothing_but_invalid_proposal(reply):
    strategy = FileTree(TREE)
    try:
        edits = strategy.edits_for(TREE, reply)
    except InvalidProposal:
        return
    assert [e.key for e in edits] == list(files_of(reply.strip(), TREE))  # each path as the file it names
    assert all(e.before == TREE.get(e.key) for e in edits)


@FUZZ
@given(replies, st.sampled_from([SingleSlot("Be kind."), AppendRules(["Be brief."]), KeyedRules(["tone", "format"])]))
def test_rule_strategies_raise_nothing_but_invalid_proposal(reply, strategy):
    try:
        edits = strategy.edits_for(strategy.initial_state(), reply)
    except InvalidProposal:
        return
    assert Governance.of(strategy).invalidity(edits) is None  # what the door let in, admission admits


def test_the_door_refuses_the_control_codes_admission_refuses():
    governance = Governance()
    flag = "🏴\U000e0067\U000e0062\U000e0077\U000e006c\U000e0073\U000e007f"  # Wales, spelled in tag characters
    for code in [*range(0x200), 0x2028, 0x200D, 0xFE0F, 0xFEFF, 0xD800, 0xDFFF, *range(0xE0000, 0xE0081), 0xE0100]:
        text = f"a{chr(code)}b{flag}"
        door = text_refusal(text, cap=MAX_PROPOSAL_CHARS)
        admission = governance.invalidity([Edit(key="k", after=text)])
        assert (door is None) == (admission is None), (hex(code), door, admission)


# --- the rule reader and its helpers ---------------------------------------------------------


@FUZZ
@given(small_replies, st.sampled_from(["rule", "merged"]))
def test_tagged_agrees_with_the_regex_it_replaced(reply, tag):
    assert tagged(reply, tag) == old_tagged(reply, tag)


# What the rule reader has read differently on purpose since the rewrite, each pinned by example in
# test_reflect.py: a heading, a label, a list item or a refusal at a line's start, and a rule of no words.
DELIBERATE = re.compile(r"^[\s*_`\"']*(?:#|[-*•]\s|\d+[.)]\s|\w*\s*rules?\b|sorry|i\b|i'm\b|as an ai|unfortunately)",
                        re.IGNORECASE | re.MULTILINE)


def read_on_purpose_since(reply: str) -> bool:
    body = old_tagged(reply, "rule")
    if body is None:
        lines = OLD_RULE_LINE.findall(reply)
        body = lines[-1] if lines else reply
    rule = outcome(lambda: old_parse_rule(reply))
    return bool(DELIBERATE.search(body)) or (isinstance(rule, str) and not any(ch.isalnum() for ch in rule))


@FUZZ
@given(small_replies)
def test_unwrap_and_parse_rule_agree_with_what_they_replaced(reply):
    assert unwrap(reply) == old_unwrap(reply)
    if not read_on_purpose_since(reply):
        assert outcome(lambda: parse_rule(reply)) == outcome(lambda: old_parse_rule(reply))


@FUZZ
@given(replies)
def test_parse_rule_returns_a_rule_none_or_value_error(reply):
    rule = outcome(lambda: parse_rule(reply))
    assert rule is None or rule is ValueError or (isinstance(rule, str) and 0 < len(rule) <= 1000)
    inside = tagged(reply, "rule")
    assert inside is None or inside in reply


@FUZZ
@given(replies)
def test_rule_reflector_never_crashes_on_a_reply(reply):
    propose = reflector(scripted(lambda prompt: reply))
    try:
        rule = propose("", TASK, "x", 0.0)
    except InvalidProposal:
        assert propose.stats == {"unreadable": 1}
        return
    assert rule is None or isinstance(rule, str)


# --- the tree reflector ------------------------------------------------------------------------


@FUZZ
@given(replies)
def test_no_unsafe_path_survives_the_tree_reflector(reply):
    strategy = FileTree(TREE, max_files_per_diff=None, frozen=["hooks/*"])
    propose = tree_reflector(scripted(lambda prompt: reply), strategy=strategy)
    try:
        proposal = propose.validate(reply)
    except InvalidProposal:
        return
    read = files_of(reply, ())  # each path as validate reads it, with no folder to match it against
    edits = strategy.edits_for(TREE, proposal)  # what validation passes, the strategy reads back alike
    for edit in edits:
        assert edit.key in read and unsafe_key_reason(edit.key) is None
        assert not edit.key.startswith("hooks/")
    assert Governance.of(strategy).invalidity(edits) is None


def test_a_tag_left_open_in_one_file_cannot_reach_into_the_next():
    strategy = FileTree(TREE, max_files_per_diff=None)
    # Re-emitted, the open delete tag in a.md would end at the quote of the next block's path and
    # read "\u2003" and "/>" after it as its close: a delete no one asked for.
    reply = '<file path="a.md">see <delete path="q</file><file path="\u2003/>x">y</file>'
    # Refused either way: by the read-back check, or first by the key rule that refuses '>' in names.
    with pytest.raises(InvalidProposal, match="unclosed <file or <delete tag|Windows file names cannot"):
        tree_reflector(scripted(["unused"]), strategy=strategy).validate(reply)


# --- fusion and the three-way merge ----------------------------------------------------------


@FUZZ
@given(replies)
def test_llm_fusion_turns_any_reply_into_a_text_it_may_store_or_a_conflict(reply):
    fuse = llm_fusion(scripted(lambda prompt: reply))
    merged = fuse("x\n", "y\n", "z\n")
    assert merged is False or Governance().invalidity([Edit(key="k", after=merged)]) is None
    assert sum(fuse.stats.values()) == 1


line = st.sampled_from(["a", "b", "c", "d", ""])
small_texts = st.lists(line, max_size=6).map("\n".join) | st.lists(line, max_size=6).map(lambda ls: "\n".join(ls) + "\n")


@st.composite
def merge_cases(draw) -> tuple[str, str, str]:
    """A base of a few lines and two edits of it, line by line: kept, changed, dropped or followed by
    a new line; edits far apart merge, edits near each other conflict."""
    base = draw(st.lists(line, max_size=6))

    def edited() -> list[str]:
        out = []
        for old in base:
            verb = draw(st.sampled_from(["keep", "keep", "keep", "change", "drop", "add"]))
            out += {"keep": [old], "change": [draw(line)], "drop": [], "add": [old, draw(line)]}[verb]
        return out

    return tuple("\n".join(lines) + draw(st.sampled_from(["", "\n"])) for lines in (base, edited(), edited()))


def git_merge_file(tmp_path, base: str, ours: str, theirs: str) -> str | None:
    """`git merge-file -p` run directly: the merged text, or None when it reports a conflict."""
    for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp_path / name).write_bytes(text.encode("utf-8"))
    done = subprocess.run(["git", "merge-file", "-p", "ours", "base", "theirs"], cwd=tmp_path, capture_output=True)
    assert done.returncode >= 0, done.stderr
    return done.stdout.decode("utf-8") if done.returncode == 0 else None


@settings(FUZZ, max_examples=max(EXAMPLES // 2, 20))
@given(merge_cases())
def test_merge_text_agrees_with_git_merge_file(tmp_path, case):
    base, ours, theirs = case
    merged = merge_text(base, ours, theirs)
    event("conflict" if merged is None else "one side" if base in (ours, theirs) else "merged")
    assert merged == git_merge_file(tmp_path, base, ours, theirs)


def test_the_merge_cases_hold_clean_merges_and_conflicts_alike():
    seen = set()

    @settings(max_examples=60, database=None, deadline=None, derandomize=True)
    @given(merge_cases())
    def classify(case):
        base, ours, theirs = case
        merged = merge_text(base, ours, theirs)
        seen.add("conflict" if merged is None else "one side" if base in (ours, theirs) else "merged")

    classify()
    assert seen == {"conflict", "one side", "merged"}


texts = st.one_of(st.none(), small_texts, st.lists(pieces, max_size=4).map("".join))


@settings(FUZZ, max_examples=max(EXAMPLES // 2, 20))
@given(texts, texts, texts)
def test_three_way_merge_never_raises(base, ours, theirs):
    merged = ThreeWayMerge()(base, ours, theirs)
    assert merged is False or merged is None or isinstance(merged, str)


@pytest.mark.parametrize("odd", ["\x00", "\ud800"])
def test_text_git_cannot_merge_is_a_conflict(odd):
    assert merge_text("a\nb\n", f"a{odd}\nb\n", "a\nB\n") is None
    assert merge_text(f"a\n{odd}\n", "A\n", "a\nB\n") is None


# --- time: linear in the input ---------------------------------------------------------------


def _seconds(fn: Callable[[str], object], *texts: str) -> list[float]:
    """The CPU seconds this thread spends in one call on each of `texts` (not the wall clock's: a
    machine busy with other work stretches that, a size at a time), each averaged over enough
    calls to last 20 ms, the best of five rounds that take each text in turn."""
    calls = [_calls_for_20_ms(fn, text) for text in texts]
    best = [float("inf")] * len(texts)
    for _ in range(5):
        for i, text in enumerate(texts):
            start = time.thread_time()
            for _ in range(calls[i]):
                _quietly(fn, text)
            best[i] = min(best[i], (time.thread_time() - start) / calls[i])
    return best


def _calls_for_20_ms(fn: Callable[[str], object], text: str) -> int:
    calls = 1
    while True:
        start = time.thread_time()
        for _ in range(calls):
            _quietly(fn, text)
        if time.thread_time() - start >= 0.02:
            return calls
        calls *= 2


def _quietly(fn: Callable[[str], object], text: str) -> None:
    try:
        fn(text)
    except ValueError:  # InvalidProposal is one
        pass


def _repeat(unit: str, n: int) -> str:
    return unit * (n // len(unit))


def _validate(text: str) -> object:
    return tree_reflector(scripted(["unused"]), strategy=FileTree(TREE, max_files_per_diff=None)).validate(text)


def _fuse(text: str) -> object:
    return llm_fusion(scripted(lambda prompt: text))("x\n", "y\n", "z\n")


ADVERSARIAL = {  # the inputs that made the old regexes quadratic or worse, and the brief's others
    "unclosed file tags": lambda n: _repeat('<file path="a">', n),
    "file tags without a closing quote": lambda n: _repeat('<file path="', n),
    "delete tags without '/>'": lambda n: _repeat('<delete path="a"  ', n),
    "numbered file tags, unclosed": lambda n: _repeat('<file-1 path="a">', n),
    "closing tags outside any block": lambda n: _repeat("</file-1></file>", n),
    "unclosed rule tags": lambda n: _repeat("<rule>x", n),
    "one rule tag, then blanks": lambda n: "<rule>" + " " * n,
    "'rule', then blanks": lambda n: "rule" + " " * n,
    "a fence, then backticks": lambda n: "```\n" + "`" * n,
    "'<' * n": lambda n: "<" * n,
}
READERS = {
    "parse_file_blocks": parse_file_blocks,
    "misread": lambda text: misread(text, {"a": text}),
    "FileTree.edits_for": lambda text: FileTree(TREE).edits_for(TREE, text),
    "TreeReflector.validate": _validate,
    "tagged": lambda text: tagged(text, "rule"),
    "unwrap": unwrap,
    "parse_rule": parse_rule,
    "_unfence": tree_module._unfence,
    "llm_fusion": _fuse,
}
PAIRS = [  # each reader on the inputs aimed at it, and on '<' * n
    ("parse_file_blocks", "unclosed file tags"), ("parse_file_blocks", "file tags without a closing quote"),
    ("parse_file_blocks", "delete tags without '/>'"), ("parse_file_blocks", "'<' * n"),
    ("parse_file_blocks", "numbered file tags, unclosed"), ("misread", "closing tags outside any block"),
    ("misread", "numbered file tags, unclosed"),
    ("FileTree.edits_for", "unclosed file tags"), ("TreeReflector.validate", "unclosed file tags"),
    ("tagged", "unclosed rule tags"), ("tagged", "one rule tag, then blanks"),
    ("parse_rule", "unclosed rule tags"), ("parse_rule", "'rule', then blanks"), ("parse_rule", "'<' * n"),
    ("unwrap", "a fence, then backticks"), ("_unfence", "a fence, then backticks"),
    ("llm_fusion", "unclosed rule tags"),
]
N = 45_000  # 4n stays under the 200,000-character cap on a rule reply, so that it is parsed, not refused


@pytest.mark.parametrize("reader, attack", PAIRS, ids=[f"{r}: {a}" for r, a in PAIRS])
def test_readers_are_linear(reader, attack):
    fn, make = READERS[reader], ADVERSARIAL[attack]
    small, large = _seconds(fn, make(N), make(4 * N))
    print(f"{reader} on {attack}: n={N:,} {small * 1e3:.3f} ms, 4n {large * 1e3:.3f} ms, ratio {large / small:.1f}")
    assert large < 12 * small + 0.001, f"4x the input took {large / small:.1f}x the time: super-linear"


def test_a_200_kb_reply_of_unclosed_file_tags_is_refused_naming_what_it_lacks():
    """How long it takes grows with its length alone: test_readers_are_linear."""
    reply = _repeat('<file path="x">', 200_000)
    with pytest.raises(InvalidProposal, match="no <file"):
        FileTree({"x": "old\n"}).edits_for({"x": "old\n"}, reply)
