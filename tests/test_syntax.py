"""A change leaves each file it edits as readable as it found it: Python compiles, frontmatter parses."""

from __future__ import annotations

import pytest

from agentdescent import AppendRules, FileTree, InvalidProposal, KeyedRules, evolve
from agentdescent.agents import scripted
from agentdescent.config import Policies
from agentdescent.governance import Governance, syntax
from agentdescent.governance.syntax import MAX_PARSED_CHARS, breakage
from agentdescent.ledger import Ledger
from agentdescent.reflect import tree_reflector
from agentdescent.step.admit import admit
from agentdescent.step.aggregator import Aggregator
from agentdescent.step.policies import BetaAcceptance
from agentdescent.types import Diff, Edit, EvidenceCard, Task
from tests.doubles import numbered_tasks

AGENT = 'ROUTES = """\n- invoice -> billing\n"""\n\n\ndef route(ticket: str) -> str:\n    return "general"\n'
GOOD_AGENT = AGENT.replace("billing\n", "billing\n- refund -> returns\n")
BROKEN_AGENT = GOOD_AGENT.replace("-> str:", "-> str")
REVIEWER = "---\nname: reviewer\ndescription: Reviews a change and gives a verdict\ntools: Read, Grep\n---\nVerdict: maybe\n"
BROKEN_REVIEWER = REVIEWER.replace("a change and gives", "a change: the verdict word and gives")


@pytest.mark.parametrize("key, before, after, said", [
    ("agent.py", AGENT, BROKEN_AGENT, "would not compile: line 7: expected ':'"),
    ("agent.py", "x = 1\n", "x = (\n", "would not compile: line 1: '(' was never closed"),
    ("tools/new.py", None, "return 1\n", "would not compile: line 1: 'return' outside function"),
    # (a missing colon: a trailing comma's message is worded otherwise from Python 3.13)
    ("new.json", None, '{"a" 1}\n', "would not be valid JSON: line 1: Expecting ':' delimiter"),
    ("conf/new.yaml", None, "a: [\n", "would not be valid YAML: line 2: "),
    ("agent.py", "x = 1\n", "x = " + "-" * 90_000 + "1\n", "would not compile: line 1: "),  # past the parser's depth
    (".claude/agents/reviewer.md", REVIEWER, BROKEN_REVIEWER,
     "would break its frontmatter: line 3: mapping values are not allowed"),
    ("agents/r.md", REVIEWER, "\ufeff" + BROKEN_REVIEWER.replace("\n", "\r\n"), "line 3: mapping values are not allowed"),
    ("r.md", REVIEWER, "Verdict: maybe\n", "line 1: the first line is not '---'"),
    ("r.md", REVIEWER, REVIEWER.replace("tools: Read, Grep\n---", "tools: Read, Grep"), "no line '---' closes it"),
    ("r.md", REVIEWER, "---\nreviews changes\n---\nbody\n", "line 2: it reads as str, not as fields"),
    ("r.md", REVIEWER, "---\n---\nbody\n", "it reads as nothing"),
    ("c.json", '{"a": 1}\n', '{"a" 1}\n', "would not be valid JSON: line 1: Expecting ':' delimiter"),
    ("c.yml", "a: 1\n", "a: 1\n b: [\n", "would not be valid YAML: line 2: mapping values are not allowed"),
])
def test_a_file_that_parsed_and_no_longer_does_is_named_with_its_line_and_the_parser_s_words(key, before, after, said):
    assert said in breakage(key, before, after)


@pytest.mark.parametrize("key, before, after", [
    ("agent.py", AGENT, AGENT.replace("general", "billing")),
    ("agent.py", "x = (\n", "x = [\n"),  # broken before: its state is not this change's doing
    ("agent.py", AGENT, None),  # a deletion
    ("agent.py", "x = '\\d'\n", "x = '\\d'\ny = 2\n"),  # an invalid escape warns, and compiles
    ("agent.py", "\ufeffx = 1\n", "\ufeffx = 2\n"),  # a byte order mark, which Python skips
    ("r.md", REVIEWER, REVIEWER.replace("maybe", "yes")),
    ("r.md", "# Notes\nno frontmatter\n", "---\nbroken: [\n---\n"),  # it had none to keep
    ("r.md", "---\nreviews changes\n---\n", "---\n: [\n---\n"),  # nor fields
    ("new.md", None, BROKEN_REVIEWER),  # a new Markdown file may open with a rule, not a frontmatter
    ("c.yaml", "a: 1\n---\nb: 2\n", "a: 1\n---\nb: 3\n"),  # several documents
    ("notes.txt", "a\n", "{\n"),
    ("agent.py", "x = 1\n", "x = (\n" + "#" * MAX_PARSED_CHARS),  # past the cap: not parsed
    ("r.md", REVIEWER, "---\nx: [\n" + "#\n" * MAX_PARSED_CHARS + "---\n"),
])
def test_what_is_left_alone(key, before, after):
    assert breakage(key, before, after) is None


def test_a_text_the_parser_is_slow_on_is_not_parsed_past_the_cap(monkeypatch):
    """Python's parser takes time quadratic in the fields of one f-string: a hostile file of 1 MB
    would hold the step for minutes."""
    slow = "x = f'" + "{1}" * 400_000 + "'\n"
    parsed = []
    monkeypatch.setattr(syntax, "_parsed", lambda kind, text: parsed.append(len(text)))
    assert breakage("agent.py", "x = 1\n", slow) is None
    assert parsed == [len("x = 1\n")]  # head's text only: the long one is never handed to a parser


def test_governance_refuses_it_as_invalid_naming_the_file_and_leaves_a_playbook_s_keys_alone():
    edits = [Edit(key="agent.py", before=AGENT, after=BROKEN_AGENT)]
    said = Governance.of(FileTree({"agent.py": AGENT})).invalidity(edits)
    assert said.startswith("'agent.py' would not compile: line 7: expected ':'") and "must leave it parsing" in said
    assert "a new file of its kind must compile" in Governance().invalidity([Edit(key="x.py", after="def f(:\n")])
    assert "a new file of its kind must load as JSON" in Governance().invalidity([Edit(key="x.json", after="{")])
    for playbook in (AppendRules(), KeyedRules(["agent.py"])):
        assert Governance.of(playbook).invalidity(edits) is None  # a key there is no file
    kind, why = admit(Diff(id="d1", artifact_id="a", base_version=0, edits=edits), "a", Governance())
    assert kind == "invalid" and "'agent.py' would not compile" in why


def test_a_folder_s_proposal_and_a_tree_reflector_s_reply_are_refused_before_any_rollout():
    tree = {"agent.py": AGENT, ".claude/agents/reviewer.md": REVIEWER}
    strategy = FileTree(tree)
    with pytest.raises(InvalidProposal, match="'agent.py' would not compile: line 7"):
        strategy.edits_for(tree, f'<file path="agent.py">\n{BROKEN_AGENT}</file>')
    reply = f'<file path=".claude/agents/reviewer.md">\n{BROKEN_REVIEWER}</file>'
    with pytest.raises(InvalidProposal, match="reviewer.md' would break its frontmatter: line 3"):
        tree_reflector(scripted(["unused"]), strategy=strategy).validate(reply, tree)


@pytest.mark.parametrize("fixes, said", [
    ({"agent.py": BROKEN_AGENT}, "'agent.py' would not compile: line 7: expected ':'"),
    ({"agent.py": GOOD_AGENT, ".claude/agents/reviewer.md": BROKEN_REVIEWER},  # riding with a right change
     "'.claude/agents/reviewer.md' would break its frontmatter: line 3: mapping values are not allowed"),
])
@pytest.mark.parametrize("cheap_eval_tasks", [None, 2])  # the step measures a diff, or its worker does first
@pytest.mark.parametrize("how", ["propose", "tree_reflector"])
def test_in_evolve_a_change_that_breaks_agent_py_or_a_frontmatter_is_invalid_and_never_rolled_out(
        how, cheap_eval_tasks, fixes, said):
    """The agent reads the harness rather than running it, so a broken text scores as well as a
    right one: nothing but the check stops it."""
    tree = {"agent.py": AGENT, ".claude/agents/reviewer.md": REVIEWER, "README.md": "# harness\n"}
    reply = "".join(f'<file path="{path}">\n{text}</file>\n' for path, text in fixes.items())
    seen: list[dict[str, str]] = []

    def run(files, task):
        seen.append(dict(files))
        return "returns" if "refund -> returns" in files["agent.py"] else "general"

    propose = tree_reflector(scripted(lambda p: reply), strategy=FileTree(tree)) if how == "tree_reflector" else \
        (lambda rendered, task, output, reward: reply)
    result = evolve(numbered_tasks(8), lambda t, o: float(o == "returns"), run=run, propose=propose,
                    strategy=FileTree(tree), rounds=1, n_workers=2, cheap_eval_tasks=cheap_eval_tasks)
    assert set(result.outcomes()) == {"invalid"}
    assert all(said in o.reason for o in result.outcome_list)
    assert result.rendered == tree
    assert seen and all(files == tree for files in seen)  # no rollout saw a broken text


def test_a_stale_change_whose_text_merged_onto_head_s_would_not_compile_is_invalid(tmp_path):
    """Each edit compiles on its own; stacked after head's new last line, the late one's indented
    line is an error."""
    tasks = [Task(id=f"t{i}", prompt=f"task {i}") for i in range(4)]
    ledger = Ledger(tmp_path / "ledger")
    base = "def f():\n    return 1\n"
    ledger.commit("a", {"agent.py": base}, expected_version=0, message="seed")
    agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), policies=Policies(acceptance=BetaAcceptance(size=4)),
                     train=tasks, score=lambda jobs: [[float(f"fix{t.id[1:]}" in "".join(s.values())) for t in ts] for s, ts in jobs])

    def change(id_: str, line: str, task: str) -> Diff:
        return Diff(id=id_, artifact_id="a", base_version=1, evidence=EvidenceCard(task_ids=[task]),
                    edits=[Edit(key="agent.py", before=base, after=base + line)])

    first = agg.step([change("first", "x = 0  # fix1\n", "t1")], step=0, sample=tasks)
    assert [o.kind for o in first.outcomes] == ["committed"]
    late = agg.step([change("late", "    y = 2  # fix2\n", "t2")], step=1, sample=tasks)
    [outcome] = late.outcomes
    assert outcome.kind == "invalid" and outcome.reason.startswith(
        "merged onto head (version 2), 'agent.py' would not compile: line 4: unexpected indent")
    assert ledger.snapshot("a") == {"agent.py": base + "x = 0  # fix1\n"}


DECORATED = "x = 1\n\n\ndef f():\n    return 1\n"
FRONT = "---\nname: reviewer\ndescription: Reviews a change\n---\nVerdict: maybe\n"


@pytest.mark.parametrize("key, base, weak, strong, said", [
    # one turns a line into a decorator, the other puts a statement before the def: merged three-way
    ("agent.py", DECORATED, DECORATED.replace("x = 1", "@staticmethod  # fix1"),
     DECORATED.replace("def f", "y = 2  # fix2\ndef f"), "'agent.py' would not compile: line 4: invalid syntax"),
    # both add a last line; stacked, the indented one comes after the other's
    ("agent.py", "def f():\n    return 1\n", "def f():\n    return 1\n    y = 2  # fix1\n",
     "def f():\n    return 1\nx = 0  # fix2\n", "'agent.py' would not compile: line 4: unexpected indent"),
    # one goes on with the description on a second line, the other adds tools before it
    ("r.md", FRONT, FRONT.replace("change\n", "change\n  and gives a verdict fix1\n"),
     FRONT.replace("change\n", 'change\ntools: "Read, Grep fix2"\n'), "'r.md' would break its frontmatter: line 5"),
])
def test_two_edits_of_one_file_whose_merge_would_not_parse_are_a_conflict_and_one_lands_alone(
        tmp_path, key, base, weak, strong, said):
    """Each edit parses on its own; the text resolve would merge them into does not, so it is never
    committed: the better evidence lands alone, and the other diff loses saying why."""
    tasks = [Task(id=f"t{i}", prompt=f"task {i}") for i in range(4)]
    ledger = Ledger(tmp_path / "ledger")
    ledger.commit("a", {key: base}, expected_version=0, message="seed")
    agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), policies=Policies(acceptance=BetaAcceptance(size=4)),
                     train=tasks, score=lambda jobs: [[float(f"fix{t.id[1:]}" in "".join(s.values())) for t in ts] for s, ts in jobs])

    def change(id_: str, text: str, task: str, gain: float) -> Diff:
        card = EvidenceCard(task_ids=[task], verify_before=0.0, verify_after=gain)
        return Diff(id=id_, artifact_id="a", base_version=1, evidence=card, edits=[Edit(key=key, before=base, after=text)])

    assert breakage(key, base, weak) is None and breakage(key, base, strong) is None
    report = agg.step([change("strong", strong, "t2", 1.0), change("weak", weak, "t1", 0.5)], step=0, sample=tasks)
    outcomes = {o.diff_id: o for o in report.outcomes}
    assert outcomes["strong"].kind == "committed" and outcomes["weak"].kind == "conflict_lost"
    assert said in outcomes["weak"].reason and "better evidence" in outcomes["weak"].reason
    assert ledger.snapshot("a") == {key: strong}
