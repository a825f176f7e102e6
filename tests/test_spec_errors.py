"""What a spec's errors may say about a file that is not a spec: field names that look like field
names, counts, positions and kinds of parse errors, never its lines, and never a key."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from agentdescent.runs import read_spec
from agentdescent.runs.spec_problems import MESSAGE_CHARS, NAMED_UNKNOWN, Problem, SpecError
from tests import keyword_domain as domain
from tests.mcp_support import REPO

HASH = "$6$saltsalt$Q9mX2vLr7TtP0aHc3kZyW1uE5oN8bJ4fGdSiVqRx6l"
KEY = "sk-live-7f3a9c2e1b5d8a4f6e0c2b9d1a7e3f5c"
SHADOW = f"root:*:19700:0:99999:7:::\nalice:{HASH}:19700:0:99999:7:::\n"
CREDENTIALS = f"OPENAI_API_KEY={KEY}:\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY:\n"


def _said(path) -> str:
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    return str(caught.value)


@pytest.mark.parametrize("name, text, said", [
    ("run.yaml", "target: p.md\nrounds: %s\n", "run.yaml holds a number too long to read (over 4,300 digits) at line 2, column 9"),
    ("run.json", '{"target": "p.md",\n "rounds": %s}',
     "run.json holds a number too long to read (over 4,300 digits) at line 2, column 12")])
def test_a_number_too_long_to_read_is_named_so_with_where_it_stands(tmp_path, name, text, said):
    """Python reads at most 4,300 digits as an int, and its ValueError says nothing of where."""
    path = tmp_path / name
    path.write_text(text % ("9" * 5000), encoding="utf-8")
    assert f"{said}; write a shorter one and plan again" in _said(path)


@pytest.mark.parametrize("name, content", [("shadow", SHADOW), ("credentials.yaml", CREDENTIALS)])
def test_a_foreign_file_is_counted_not_quoted(tmp_path, monkeypatch, name, content):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    said = _said(path)
    assert "holds 2 entries that are not fields of a run spec" in said and "target: is required" in said
    for secret in (HASH, "Q9mX2vLr7T", KEY, "7f3a9c2e", "wJalrXUtnF", "alice"):
        assert secret not in said
    done = subprocess.run([sys.executable, "-m", "agentdescent", "plan", str(path.rename(path.with_suffix(".yaml")))],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not fields of a run spec" in done.stderr
    assert all(secret not in done.stderr + done.stdout for secret in (HASH, KEY, "alice"))


def test_a_misspelt_field_is_still_named_and_a_flood_of_them_is_capped(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("target: p.md\ntasks: t.jsonl\nagent: host\nrouds: 3\n" +
                    "".join(f"extra_{i}: 1\n" for i in range(50)), encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    named = [p for p in caught.value.problems if "is not a field of a run spec" in p.message]
    assert named[0].field == "rouds" and "did you mean 'rounds'?" in named[0].message and len(named) == NAMED_UNKNOWN
    assert any(p.field == "spec" and f"holds {51 - NAMED_UNKNOWN} entries" in p.message for p in caught.value.problems)


def test_a_misspelt_field_is_answered_with_the_field_it_is_close_to_where_it_stands(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("target: p.md\ntasks: {file: t.jsonl, promt: request}\nagent: {kind: python, reff: m:f}\n"
                    "n_worker: 2\nbudget: {max_call: 9}\nparallelism: {executer: thread}\nscorer: {name: exact, "
                    "zzz: 1}\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    said = {p.field: p.message for p in caught.value.problems}
    assert said["tasks.promt"].endswith("did you mean 'prompt'?") and said["agent.reff"].endswith("did you mean 'ref'?")
    assert said["n_worker"].endswith("did you mean 'n_workers'?") and said["budget.max_call"].endswith("'max_calls'?")
    assert said["parallelism.executer"].endswith("did you mean 'executor'?")
    assert said["scorer.zzz"] == "is not a field of a run spec (check its spelling)"


def test_a_parse_error_gives_the_position_and_kind_not_the_text(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yaml_spec = tmp_path / "run.yaml"
    yaml_spec.write_text(f"target: p.md\n{KEY} bad: [\n", encoding="utf-8")
    said = _said(yaml_spec)
    assert re.search(r"is not valid YAML: line \d+, column \d+: ", said) and KEY not in said and "bad" not in said
    json_spec = tmp_path / "run.json"
    json_spec.write_text(f'{{"target": "p.md",\n {KEY}}}', encoding="utf-8")
    said = _said(json_spec)
    assert "is not valid JSON: line 2, column 2" in said and KEY not in said


@pytest.mark.parametrize("name, text, said", [
    ("run.yaml", "target: p.md\nrounds: 2\ntasks: t.jsonl\nrounds: 50\n", "'rounds' is given twice (lines 2 and 4)"),
    ("run.yaml", "target: p.md\nbudget: {max_calls: 10, max_calls: 9000}\n", "'max_calls' is given twice (lines 2 and 2)"),
    ("run.yaml", f"target: p.md\n{KEY}: 1\n{KEY}: 2\n", "is given twice (lines 2 and 3)"),
    ("run.json", '{"target": "p.md", "agent": "host", "agent": "claude_code"}', "'agent' is given twice in one object"),
    ("run.yaml", "target: p.md\nbudget:\n  <<: {max_calls: 100}\n  <<: {max_calls: 9000}\n",
     "the merge key << is given twice (lines 3 and 4)")])
def test_a_key_given_twice_is_refused_not_read_as_the_last(tmp_path, monkeypatch, name, text, said):
    """A spec could show a harmless budget or agent near its top and set another further down."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    message = _said(path)
    assert said in message and KEY not in message


@pytest.mark.parametrize("name, text", [("run.json", '{"target": "p.md", "tasks": "t.jsonl", "agent": "host"}'),
                                        ("run.yaml", "target: p.md\ntasks: t.jsonl\nagent: host\n")])
def test_a_spec_saved_with_a_byte_order_mark_is_read(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(("\ufeff" + text).encode("utf-8"))
    assert read_spec(path).agent.kind == "host"


def test_an_unknown_scorer_from_a_foreign_value_is_not_quoted():
    value = f"alice:{HASH}:1:::"
    with pytest.raises(SpecError) as caught:
        read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "host", "scorer": value})
    said = str(caught.value)
    assert f"unknown scorer a {len(value)}-character entry" in said
    assert HASH not in said and "alice" not in said


def test_every_problem_is_redacted_and_cut(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    problem = Problem(field="agent", message=f"it printed {KEY} " + "x" * 2000 + " give the real path, /p/q")
    assert KEY not in problem.message and "[redacted OPENAI_API_KEY]" in problem.message
    assert len(problem.message) == MESSAGE_CHARS and "…" in problem.message  # cut in its middle: the fix stays
    assert problem.message.startswith("it printed [redacted") and problem.message.endswith("x give the real path, /p/q")


@pytest.mark.parametrize("given, said", [
    ({"budget": 5}, ("budget", 'is a number, where a mapping of its fields goes (docs/runs.md, "A run spec"')),
    ({"blast_radius": {"*": "L9"}}, ("blast_radius", "maps '*' to 'L9', which is not L0, L1 or L2; give skill, harness")),
    ({"blast_radius": "skil"}, ("blast_radius", "is 'skil'; give skill, harness, plugin, or a mapping")),
])
def test_a_wrong_shape_is_said_in_the_spec_s_words_once(given, said):
    with pytest.raises(SpecError) as caught:
        read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "host", **given})
    assert [(p.field, p.message[:len(said[1])]) for p in caught.value.problems] == [said]
    assert not any(word in str(caught.value) for word in ("instance of", "literal[", "Input should"))


def test_a_yaml_merge_key_merges_and_the_mapping_s_own_keys_win(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("target: p.md\ntasks: [{id: a, prompt: x}]\nagent: host\nparallelism: &p {asynchronous: true}\n"
                    "budget: {<<: {max_calls: 10, max_tokens: 500}, max_calls: 20}\n", encoding="utf-8")
    spec = read_spec(path)
    assert (spec.budget.max_calls, spec.budget.max_tokens) == (20, 500)


def test_a_prompt_that_formats_its_task_is_told_the_task_goes_in_as_it_is():
    with pytest.raises(SpecError, match=r"names the task as \{task\} and nothing else"):
        read_spec({"target": "p.md", "tasks": [{"id": "a", "prompt": "x"}], "agent": "host",
                   "prompt": "Q: {task:>1000000000}"})


@pytest.mark.parametrize("field", ["held_out_frac", "target_reward", "price_per_call"])
def test_a_number_that_is_not_finite_is_named_so(field):
    """NaN fails every bound, so it was told "must be less than 1"."""
    with pytest.raises(SpecError, match=rf"{field}: must be a finite number"):
        read_spec({"target": "p.md", "tasks": [{"id": "a", "prompt": "x"}], "agent": "host", field: float("nan")})


def test_a_task_given_in_the_spec_has_a_one_line_id_too(tmp_path):
    from agentdescent.runs import Service

    (tmp_path / "p.md").write_text("Answer.\n", encoding="utf-8")
    tasks = [{"id": f"t{i}", "prompt": "x"} for i in range(5)] + [{"id": "a\nFAKE: line", "prompt": "x"}]
    with pytest.raises(SpecError, match="holds a line break or a control character"):
        Service().plan({"target": str(tmp_path / "p.md"), "tasks": tasks, "agent": "host"})


@pytest.mark.parametrize(("options", "said"), [
    ({"tmeout": 3}, r"agent: options: tmeout is not an option the openai client takes; it takes .*timeout"),
    ({"backoff": [-1, -1]}, r"agent: backoff must be two numbers of seconds >= 0"),
    ({"backoff": [5, 1]}, r"agent: backoff must be .* the longest \(no shorter than the first\)"),
    ({"max_tokens": 0}, r"agent: max_tokens must be a whole number of tokens above 0"),
    ({"temperature": "hot"}, r"agent: temperature must be a number >= 0"),
    ({"max_retries": "3"}, r"agent: max_retries must be a whole number >= 0"),
    ({"api_key_env": 5}, r"agent: api_key_env must name an environment variable"),
])
def test_plan_refuses_agent_options_the_client_refuses(service, tmp_path, options, said):
    """They used to pass plan and fail the run at its first call or first retry."""
    spec = {**domain.spec(tmp_path), "agent": {"kind": "openai", "model": "m", "options": options}}
    with pytest.raises(SpecError, match=said):
        service.plan(spec)


def test_plan_refuses_an_artifact_id_the_ledger_cannot_hold(service, tmp_path):
    with pytest.raises(SpecError, match=r"artifact_id: 'a b/c' is not one folder name"):
        service.plan({**domain.spec(tmp_path), "artifact_id": "a b/c"})


def test_plan_refuses_a_cli_agent_executable_that_is_no_name(service, tmp_path):
    spec = {**domain.spec(tmp_path), "agent": {"kind": "claude_code", "options": {"executable": 5}}}
    with pytest.raises(SpecError, match=r"agent: options.executable must be a program's name or path"):
        service.plan(spec)
