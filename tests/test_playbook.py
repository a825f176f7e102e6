"""A playbook's page (`artifacts/playbook.py`): the text its rules are kept in comes back byte for
byte, but where a run changed a rule; a run that changes nothing writes nothing; the page's own
bullets are rules a run may remove or reword, and proposing one again is a duplicate."""

from __future__ import annotations

import pytest

from agentdescent import evolve
from agentdescent.artifacts.state import apply
from agentdescent.artifacts.strategies import AppendRules
from tests import keyword_domain as domain
from tests.doubles import echo, numbered_tasks
from tests.runs_support import wait

PAGES = ["Keep answers short.  \nCite sources.\t\n\n", "Hello  \nWorld  \n", "Hello\n\n\n", "  \n\n\t\n",
         "a\r\nb\nc\r\n", "Hello", "a\r\nb", ""]


@pytest.mark.parametrize("text", PAGES)
def test_a_page_with_no_rule_added_renders_as_it_is(text):
    rules = AppendRules.under(text)
    assert rules.render(rules.initial_state()) == text


@pytest.mark.parametrize(("text", "rendered"), [
    ("Keep answers short.  \nCite sources.\t\n\n", "Keep answers short.  \nCite sources.\t\n- Cite.\n\n"),
    ("Hello  \nWorld  \n", "Hello  \nWorld  \n- Cite.\n"),
    ("Hello\n\n\n", "Hello\n- Cite.\n\n\n"),
    ("  \n\n\t\n", "- Cite.\n  \n\n\t\n"),
    ("a\r\nb\nc\r\n", "a\r\nb\nc\r\n- Cite.\r\n"),  # the break of the line the rule follows
    ("a\r\nb", "a\r\nb\r\n- Cite."),  # no last line break, as the file had none
    ("", "- Cite."),
])
def test_a_rule_added_only_inserts_its_line(text, rendered):
    assert AppendRules.under(text).render({"rule-1": "Cite."}) == rendered


def test_a_run_that_changes_nothing_shows_no_diff_and_accept_writes_nothing(service, tmp_path):
    target = tmp_path / "prompt.md"
    text = "Answer with the code.  \n" + "".join(f"rule k{n}. " for n in range(domain.RULES)) + "\t\n\n"
    target.write_text(text, encoding="utf-8", newline="")  # every task passes: nothing to propose
    run = service.start(domain.spec(tmp_path, strategy="append", rounds=2)).run_id
    assert wait(service, run).state == "finished"
    assert service.show(run).diff == ""
    accepted = service.accept(run)
    assert accepted.written == [] and accepted.backup is None, accepted
    assert target.read_bytes() == text.encode("utf-8")


PLAYBOOK = "# Routing playbook\r\n- Be brief.  \r\n* Send invoices to billing.\r\n\r\nAsk when unsure.\r\n"


def proposed(rules: AppendRules, proposal: str) -> str:
    state = rules.initial_state()
    return rules.render(apply(state, {edit.key: edit.after for edit in rules.edits_for(state, proposal)}))


def test_the_page_s_own_bullets_are_rules_to_remove_reword_or_find_again():
    rules = AppendRules.under(PLAYBOOK)
    assert sorted(rules.initial_state().values()) == ["Be brief.", "Send invoices to billing."]
    assert proposed(rules, "remove: Send invoices to billing.") == \
        "# Routing playbook\r\n- Be brief.  \r\n\r\nAsk when unsure.\r\n"
    assert proposed(rules, "replace: Be brief. => Be concise.") == \
        "# Routing playbook\r\n* Send invoices to billing.\r\n- Be concise.\r\n\r\nAsk when unsure.\r\n"
    [again] = rules.edits_for(rules.initial_state(), "be brief")
    assert again.before == again.after == "Be brief."  # a duplicate: the rule is there
    assert proposed(rules, "Cite sources.") == \
        "# Routing playbook\r\n- Be brief.  \r\n* Send invoices to billing.\r\n- Cite sources.\r\n\r\nAsk when unsure.\r\n"


def test_lines_that_only_look_like_bullets_are_the_page_s_text():
    page = "```\n- code, not a rule\n```\n- - -\n  - indented\n"
    rules = AppendRules.under(page)
    assert rules.initial_state() == {} and rules.render({"rule-1": "Cite."}) == page + "- Cite.\n"


def test_a_run_removes_a_rule_the_prompt_file_came_with():
    result = evolve(numbered_tasks(8), lambda t, o: float("Always answer no." not in o), run=echo,
                    propose=lambda *a: "remove: Always answer no.",
                    strategy=AppendRules.under("# Playbook\n- Be brief.\n- Always answer no.\n"), rounds=1, n_workers=1)
    assert result.rendered == "# Playbook\n- Be brief.\n" and result.outcomes()["committed"] == 1
