"""The file-block format: text inside a block is content, never a command, and a file whose text
holds the format's own tags goes to the model and comes back whole, or is refused with its reason."""

from __future__ import annotations

import re

import pytest

from agentdescent import FileTree, Task, evolve, load_tree, tree_reflector
from agentdescent.agents import scripted
from agentdescent.artifacts.fileblocks import parse_file_blocks
from agentdescent.errors import InvalidProposal
from agentdescent.reflect.tree_reflector import format_files

SKILL = "---\nname: s\ndescription: d\n---\nRead references/format.md.\n"
QUOTES_DELETE = '# Format\n\nKnown words:\n\nTo retire the team list, answer <delete path="references/teams.md"/>.\n'
QUOTES_CLOSE = ('# Format\n\nKnown words:\n\nA reply gives each file as:\n\n<file path="x.md">\nits text\n</file>\n\n'
                "Step 2: check the result.\nStep 3: never delete a user file.\n")


def test_a_delete_tag_inside_a_block_is_the_file_s_text():
    reply = f'<file path="references/format.md">\n{QUOTES_DELETE}</file>\n<delete path="old.md"/>'
    assert parse_file_blocks(reply) == {"references/format.md": QUOTES_DELETE, "old.md": None}


@pytest.mark.parametrize("text", [QUOTES_CLOSE, "a </file> b\n", "</file-1>\n</file>\n", "ends with </file>"])
def test_a_file_holding_the_format_s_tags_is_shown_so_that_it_reads_back_whole(text):
    shown = format_files({"a.md": text, "b.md": "b\n"})
    assert parse_file_blocks(shown) == {"a.md": text, "b.md": "b\n"}
    assert '<file path="b.md">\nb\n</file>' in shown  # a file without them is shown as ever


@pytest.mark.parametrize("reply, reason", [
    # the file's text holds </file>, given back in a plain block: cut at its first </file>
    (f'<file path="references/format.md">\n{QUOTES_CLOSE}</file>', "holds </file> in its text"),
    ('<file path="SKILL.md">\nnew\n</file>\n\nsee </file>', "a </file> outside any block"),  # a text cut short
    ('<file-1 path="SKILL.md">\nnew\n</file>', "SKILL.md has no </file-1>"),
])
def test_a_reply_that_would_cut_a_file_short_is_refused_with_its_reason(reply, reason):
    tree = {"SKILL.md": SKILL, "references/format.md": QUOTES_CLOSE}
    propose = tree_reflector(scripted(["unused"]), strategy=FileTree(tree))
    with pytest.raises(InvalidProposal, match=re.escape(reason)):
        propose.validate(reply, tree)


def test_a_proposal_with_a_closing_tag_outside_any_block_is_refused_by_the_strategy_too():
    tree = {"SKILL.md": SKILL}
    with pytest.raises(InvalidProposal, match=re.escape("a </file> outside any block")):
        FileTree(tree).edits_for(tree, '<file path="SKILL.md">\nsee </file> for more\n</file>')


WORDS = ["alpha", "bravo", "charlie", "delta"]


def word_model(prompt: str) -> str:
    """Gives references/format.md back whole, in the form it was shown, with the task's word added."""
    task = re.search(r"<task>\n(.*?)\n</task>", prompt, re.DOTALL)
    shown = re.search(r'<(file(?:-\d+)?) path="references/format\.md">\n(.*?)</\1>\n(?=<file|</files>)', prompt, re.DOTALL)
    if not task or not shown:
        return "NONE"
    tag, text = shown.groups()
    return f'<{tag} path="references/format.md">\n{text.replace("Known words:", "Known words: " + task[1].strip(), 1)}</{tag}>'


@pytest.mark.parametrize("doc", [QUOTES_DELETE, QUOTES_CLOSE], ids=["a quoted delete tag", "a quoted </file>"])
def test_a_file_quoting_the_format_is_evolved_and_written_back_whole(tmp_path, doc):
    folder = tmp_path / "skill"
    (folder / "references").mkdir(parents=True)
    files = {"SKILL.md": SKILL, "references/teams.md": "# Teams\n\nbilling, shipping\n", "references/format.md": doc}
    for key, text in files.items():
        (folder / key).write_text(text, encoding="utf-8")
    tasks = [Task(id=f"t{i}", prompt=WORDS[i % 4], gold=WORDS[i % 4].upper()) for i in range(20)]

    def run(rendered, task):
        return task.gold if f" {task.prompt}" in rendered["references/format.md"].split("\n\n")[1] else "?"

    strategy = FileTree(load_tree(folder), max_files_per_diff=2)
    result = evolve(tasks, lambda t, o: float(o == t.gold), run=run, propose=tree_reflector(scripted(word_model), strategy=strategy),
                    strategy=strategy, rounds=3, n_workers=2, self_verify=False)
    evolved = result.state["references/format.md"]
    assert evolved != doc and evolved.replace(re.search(r"Known words:[^\n]*", evolved)[0], "Known words:") == doc
    result.write_to(folder)
    on_disk = {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file()}
    assert on_disk == {**files, "references/format.md": evolved}
