"""A playbook's page (`artifacts/playbook.py`): the text its rules are kept in comes back byte for
byte, but where a run changed a rule; a run that changes nothing writes nothing."""

from __future__ import annotations

import pytest

from agentdescent.artifacts.strategies import AppendRules
from tests import keyword_domain as domain
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
