"""`agentdescent report`: one self-contained HTML page of a run, from a ledger folder or a run of the
run store, with its plots (or, without matplotlib, a line saying how to get them), every diff's
outcome, every commit's diffs and authors, the final change and the files it changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
from html import escape
from pathlib import Path

import git
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import evolve
from agentdescent.cli.main import main
from agentdescent.engine.persist.checkpoint import FOLDER
from agentdescent.report import html, write_report
from agentdescent.report.plots import INSTALL_HINT
from agentdescent.runs.draft import spec_path
from tests import keyword_domain as domain
from tests.doubles import echo, numbered_tasks, router
from tests.mcp_support import REPO, demo_spec
from tests.runs_support import wait

PNG = "data:image/png;base64,"


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    """A few rounds of the demo domain on a ledger of the module's own (tests that change it copy it)."""
    ledger = tmp_path_factory.mktemp("routed") / "ledger"
    return router(rounds=4, n_workers=3, store=ledger)


def rows(page: str, part: str) -> list[str]:
    """The table rows of the page's numbered `part` ("3": the outcomes)."""
    section = page.split(f"<h2>{part}. ", 1)[1].split("<h2>", 1)[0]
    return re.findall(r"<tr>.*?</tr>", section, re.DOTALL)


def report(capsys, *args: str) -> tuple[int, str, str]:
    """`agentdescent report ARGS` in process: its exit code, stdout and stderr."""
    return cli(capsys, "report", *args)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """`agentdescent ARGS` in process: its exit code, stdout and stderr."""
    code = main(list(args))
    said = capsys.readouterr()
    return code, said.out, said.err


def test_a_ledger_report_plots_rewards_and_lists_every_outcome_commit_and_change(routed, tmp_path, capsys):
    out = tmp_path / "run.html"
    code, said, _ = report(capsys, str(routed.ledger_path), "--out", str(out))
    assert code == 0 and f"wrote the report: {out}" in said
    page = out.read_text(encoding="utf-8")
    assert page.count(PNG) == 2 and "<script" not in page
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from anywhere
    assert escape(routed.stop_reason) in page  # the checkpoint keeps why the run stopped

    outcomes, commits = rows(page, "3"), rows(page, "4")
    for o in routed.outcome_list:
        assert any(o.diff_id in row and escape(o.reason) in row for row in outcomes), o
    versions = {o.version for o in routed.outcome_list if o.version is not None}
    assert versions
    for version in versions:
        row = next(r for r in commits if r.startswith(f"<tr><td>{version}</td>"))
        landed = [o for o in routed.outcome_list if o.version == version]
        assert all(f"{o.diff_id} by {o.author}" in row for o in landed), row

    learned = {key: text for key, text in routed.state.items() if key not in routed.initial_state}
    change = page.split("<h2>5. ", 1)[1]
    assert all(f'<span class="add">+{escape(text)}</span>' in change for text in learned.values())
    # a rule set's keys are hashes of its rules: the page names a rule by its text, a commit's by their number
    assert not any(key in change or key in "".join(commits) for key in learned)
    assert any(re.search(r"<td>\d+ rules?</td>", row) for row in commits)
    assert f"{routed.initial_reward:.3f} at the start -&gt; {routed.final_reward:.3f} at the end" in page


def test_the_default_page_goes_into_the_ledger_and_text_from_the_run_is_escaped(tmp_path, capsys):
    rule = "<script>alert('x')</script> & say the year"
    result = evolve(numbered_tasks(6), lambda task, output: float("year" in output), run=echo, propose=lambda *a: rule,
                    rounds=1, n_workers=2, store=tmp_path / "ledger")
    code, said, _ = report(capsys, str(result.ledger_path))
    path = tmp_path / "ledger" / FOLDER / "report.html"
    assert code == 0 and f"wrote the report: {path}" in said
    page = path.read_text(encoding="utf-8")
    assert "<script" not in page and escape(rule) in page



def test_a_rule_turned_around_by_a_bidi_override_reads_on_the_page_as_it_is_written(tmp_path):
    """Three raw U+202E made a browser show a rule as the opposite of what its characters say."""
    rule = "Never \u202eyrotsih tnuocca eht esolcsid\u202c to anyone."
    result = evolve(numbered_tasks(6), lambda task, output: float("anyone" in output), run=echo,
                    propose=lambda *a: rule, rounds=1, n_workers=2, store=tmp_path / "ledger")
    page = write_report(str(result.ledger_path)).read_text(encoding="utf-8")
    assert "\u202e" not in page and "Never \\u202eyrotsih" in page


def test_a_key_the_run_s_texts_quote_is_not_on_the_page(tmp_path, monkeypatch):
    key = "canary-9f8e7d6c5b4a3f2e"  # not set while the run went, so the run's texts keep it
    result = evolve(numbered_tasks(6), lambda task, output: float("year" in output), run=echo,
                    propose=lambda *a: f"Say the year; the key is {key}.", rounds=1, n_workers=2, store=tmp_path / "ledger")
    monkeypatch.setenv("CANARY_API_KEY", key)
    page = write_report(str(result.ledger_path)).read_text(encoding="utf-8")
    assert key not in page and "[redacted CANARY_API_KEY]" in page


SPECIAL = {"AMP": "Sup3r&Secret01", "QUOT": 'Sup3r"Secret02', "LT": "Sup3r<Secret03", "GT": "Sup3r>Secret04",
           "APOS": "Sup3r'Secret05"}  # each escaped on the page (&amp; &quot; &lt; &gt; &#x27;)


def test_a_key_holding_a_character_html_escapes_is_not_on_the_page_in_any_form(tmp_path, monkeypatch):
    """The page was redacted after escaping, and `&amp;` or `&quot;` inside a key hid it from redact."""
    said = " ".join(f"db {name}: {key}." for name, key in SPECIAL.items())
    result = evolve(numbered_tasks(6), lambda task, output: float("year" in output), run=echo,
                    propose=lambda *a: f"Say the year; {said}", rounds=1, n_workers=2, store=tmp_path / "ledger")
    for name, key in SPECIAL.items():  # not set while the run went, so the run's texts keep them
        monkeypatch.setenv(f"DB_{name}_PASSWORD", key)
    page = write_report(str(result.ledger_path)).read_text(encoding="utf-8")
    for name, key in SPECIAL.items():
        assert f"db {name}: [redacted DB_{name}_PASSWORD]." in page
        assert all(form not in page for form in (key, escape(key), escape(key, quote=False), "Secret0")), name

def test_without_matplotlib_the_tables_stay_and_the_plots_say_how_to_get_them(routed, tmp_path, monkeypatch):
    for name in [n for n in sys.modules if n.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # `import matplotlib...` now fails, as where it is not installed
    page = write_report(str(routed.ledger_path), out=tmp_path / "r.html").read_text(encoding="utf-8")
    assert PNG not in page and page.count(escape(INSTALL_HINT)) == 2
    assert all(o.diff_id in page for o in routed.outcome_list)


def test_a_ledger_without_a_checkpoint_still_shows_its_commits(routed, tmp_path):
    ledger = tmp_path / "old-ledger"
    shutil.copytree(routed.ledger_path, ledger)
    (ledger / FOLDER / "checkpoint.json").unlink()
    page = write_report(str(ledger)).read_text(encoding="utf-8")
    assert "has no checkpoint" in page and "No diff outcome is recorded" in page
    committed = [o for o in routed.outcome_list if o.kind == "committed"]
    assert committed and all(f"{o.diff_id} by {o.author}" in page for o in committed)  # from the trailers


def test_a_folder_run_of_the_store_by_id_lists_its_changed_files(service, tmp_path, capsys):
    target = tmp_path / "my-skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    run_id = service.start(demo_spec(target)).run_id
    assert wait(service, run_id).state == "finished"
    shown = service.show(run_id)
    path = service.store.get(run_id).file("report.html")
    assert shown.files_changed and shown.report == f"agentdescent report {run_id} writes {path}"

    code, said, _ = report(capsys, run_id[:-2])  # the first letters are enough
    assert code == 0 and f"wrote the report: {path}" in said
    page = path.read_text(encoding="utf-8")
    assert "The files changed" in page and page.count(PNG) == 2
    for name in shown.files_changed:
        assert f"<tr><td>modified</td><td class=mono>{escape(name)}</td></tr>" in page
    assert escape(str(target)) in page and "finished" in page
    for out in (target / "SKILL.md", target / "routing" / "page.html"):  # a file of the target, or a new one in it
        before = out.read_bytes() if out.exists() else None
        code, _, err = report(capsys, run_id, "--out", str(out), "--force")
        assert code == 2 and "in the target folder of run" in err and "never written there" in err, err
        assert (out.read_bytes() if out.exists() else None) == before


def test_an_unknown_run_or_a_folder_that_is_no_ledger_is_a_usage_error(service, tmp_path, capsys):
    code, _, err = report(capsys, "no-such-run")
    assert code == 2 and "no run 'no-such-run'" in err and "ledger folder" in err and "Traceback" not in err
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("hello", encoding="utf-8")
    code, _, err = report(capsys, str(folder))
    assert code == 2 and "is a folder but not a ledger" in err
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt"]  # nothing was written into it
    code, _, err = report(capsys, str(tmp_path / "missing"))
    assert code == 2 and "there is no folder" in err
    bare = git.Repo.init(tmp_path / "bare", bare=True)
    code, _, err = report(capsys, str(tmp_path / "bare"))
    assert code == 2 and "not an AgentDescent ledger" in err
    assert not bare.heads and not (tmp_path / "bare" / FOLDER).exists()  # read, never made into a ledger
    bare.close()


def test_a_run_still_going_is_reported_as_it_stands(service, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")  # its agent, slowed: the run is still going when the page is written
    run_id = service.start(domain.spec(tmp_path)).run_id
    wait(service, run_id, until=lambda s: s.state == "running" and s.round >= 1)
    page = write_report(run_id, store=service.store).read_text(encoding="utf-8")
    assert "the run is still going" in page and "1. Reward per round" in page
    service.cancel(run_id)


def test_each_round_s_tokens_and_cost_are_shown_beside_its_calls():
    from agentdescent.report.data import ReportData
    from agentdescent.result import StepRecord

    steps = [StepRecord(round=0, base_version=1, version=2, calls=100, tokens=5000, cost_usd=0.25),
             StepRecord(round=1, base_version=2, version=3, calls=160, tokens=8000, cost_usd=0.4)]
    data = ReportData(source="ledger x", ledger="x", written_at="now", target="t", kind="text", artifact_id="artifact",
                      folder=False, steps=steps)
    rounds = rows(html.page(data, {"rewards": "no plot", "calls": "no plot"}), "2")
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rounds]
    assert [c[-4:] for c in cells if c] == [["100", "100", "5000", "$0.2500"], ["60", "160", "3000", "$0.1500"]]


def test_out_that_is_a_fifo_a_device_or_a_folder_is_refused_and_left_as_it_is(routed, tmp_path, capsys):
    """The page's atomic write would put a regular file in the place of a FIFO or of `/dev/full`."""
    fifo, device, folder = tmp_path / "pipe", tmp_path / "null", tmp_path / "folder"
    os.mkfifo(fifo)
    device.symlink_to(os.devnull)  # the device the link leads to is what a write there would reach
    folder.mkdir()
    for out, kind in ((fifo, "a FIFO"), (device, "a character device"), (folder, "a folder")):
        code, said, err = report(capsys, str(routed.ledger_path), "--out", str(out))
        assert code == 2 and f"{out} is {kind}, not a regular file; give the report (--out)" in err and not said
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and device.is_symlink() and list(folder.iterdir()) == []


def test_out_over_a_file_that_is_not_a_report_is_refused_unless_forced(routed, tmp_path, capsys):
    """Any file at --out was replaced by the page, a user's notes included, with no copy kept."""
    notes, page = tmp_path / "notes.md", tmp_path / "deep" / "er" / "run.html"
    notes.write_text("my precious notes\n", encoding="utf-8")
    code, said, err = report(capsys, str(routed.ledger_path), "--out", str(notes))
    assert code == 2 and not said and err.count("\n") == 1
    assert f"{notes} is already there and is not an AgentDescent report" in err and "--force" in err
    assert notes.read_text(encoding="utf-8") == "my precious notes\n"

    assert report(capsys, str(routed.ledger_path), "--out", str(page))[0] == 0  # its missing folders are made
    assert report(capsys, str(routed.ledger_path), "--out", str(page))[0] == 0  # an earlier report is replaced
    untagged = tmp_path / "untagged.html"  # a page written before reports carried their generator tag
    untagged.write_text(page.read_text(encoding="utf-8").replace(html.GENERATOR, ""), encoding="utf-8")
    empty = tmp_path / "empty.html"  # `mktemp`'s, say: nothing in it to lose
    empty.touch()
    for out in (untagged, empty):
        assert report(capsys, str(routed.ledger_path), "--out", str(out))[0] == 0
        assert html.GENERATOR in out.read_text(encoding="utf-8")

    assert report(capsys, str(routed.ledger_path), "--out", str(notes), "--force")[0] == 0
    assert html.written_here(notes.read_bytes()[:html.HEAD_BYTES])


def test_the_runs_own_files_are_never_replaced_even_with_force(service, tmp_path, capsys):
    """The run's target, its tasks and its spec were replaced by the page as readily as any file."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in domain.tasks()), encoding="utf-8")
    spec = domain.spec(tmp_path, tasks={"file": str(tasks)}, rounds=2)
    target = Path(spec["target"])
    beside = spec_path(target)
    beside.write_text("target: prompt.md\n", encoding="utf-8")
    run_id = service.start(spec).run_id
    wait(service, run_id)
    run = service.store.get(run_id)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    owned = {target: "the target of run", Path(os.path.relpath(target)): "the target of run", link: "the target of run",
             tasks: "the tasks file of run", beside: "the spec beside the target", run.file("spec.json"): "in the folder of run",
             run.ledger / "HEAD": "in the ledger"}
    for out, what in owned.items():
        before = {p: p.read_bytes() for p in (target, tasks, beside, run.file("spec.json"), run.ledger / "HEAD")}
        code, said, err = report(capsys, run_id, "--out", str(out), "--force")
        assert code == 2 and not said and what in err and "a report is never written there, with --force or without" in err, (out, err)
        assert before == {p: p.read_bytes() for p in before} and link.is_symlink()
    assert report(capsys, run_id)[0] == 0 and run.file("report.html").is_file()  # its own page, in its folder


def test_the_spec_file_a_run_was_started_from_is_never_replaced_even_with_force(service, tmp_path, capsys):
    """Only the spec `init` writes beside the target was the run's: `--out specs/run.json --force`
    wrote the page over the spec the run was started from."""
    spec = tmp_path / "specs" / "run.json"
    spec.parent.mkdir()
    spec.write_text(json.dumps(domain.spec(tmp_path, rounds=2)), encoding="utf-8")
    code, said, _ = cli(capsys, "evolve", os.path.relpath(spec), "--json")  # from the CLI, by a relative path
    assert code == 0, said
    run_id = json.loads(said)["run_id"]
    wait(service, run_id)
    link = tmp_path / "link.json"
    link.symlink_to(spec)
    before = spec.read_bytes()
    for out in (spec, Path(os.path.relpath(spec)), tmp_path / "specs" / ".." / "specs" / "run.json", link):
        code, said, err = report(capsys, run_id, "--out", str(out), "--force")
        assert code == 2 and not said and f"the spec run {run_id} was started from ({spec})" in err, (out, err)
        assert "a report is never written there, with --force or without" in err
        assert spec.read_bytes() == before and link.is_symlink()
    started = service.start(str(spec)).run_id  # the MCP server's way: the path to the service
    wait(service, started)
    code, _, err = report(capsys, started, "--out", str(spec), "--force")
    assert code == 2 and f"the spec run {started} was started from" in err and spec.read_bytes() == before


def test_a_run_started_from_a_spec_object_or_before_its_spec_file_was_kept_reports_as_before(service, tmp_path, capsys):
    """A run without a spec file (a spec object, or a run made before its origin named the file)
    keeps the protections it had; only its page is written."""
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    run = service.store.get(run_id)
    assert "spec" not in json.loads(run.file("origin.json").read_text(encoding="utf-8"))
    for origin in ("{}", "not json", None):  # an origin of an earlier version, a damaged one, none at all
        if origin is None:
            run.file("origin.json").unlink()
        else:
            run.file("origin.json").write_text(origin, encoding="utf-8")
        assert report(capsys, run_id, "--out", str(tmp_path / "page.html"))[0] == 0
        code, _, err = report(capsys, run_id, "--out", str(tmp_path / "prompt.md"), "--force")
        assert code == 2 and "the target of run" in err


def test_out_in_a_file_as_if_it_were_a_folder_says_so_and_force_does_not_help(routed, tmp_path, capsys):
    """`--out notes.md/x.html` said notes.md/x.html was there and not a report, and to add --force."""
    notes = tmp_path / "notes.md"
    notes.write_text("my precious notes\n", encoding="utf-8")
    for out in (notes / "x.html", notes / "deeper" / "x.html"):
        for force in ([], ["--force"]):
            code, said, err = report(capsys, str(routed.ledger_path), "--out", str(out), *force)
            assert code == 2 and not said and f"{notes} is a regular file, not a folder" in err, err
            assert "already there" not in err and "--force" not in err
    assert notes.read_text(encoding="utf-8") == "my precious notes\n"


@pytest.mark.parametrize("damage", ["empty dev", "dev on a missing commit", "garbage HEAD"])
def test_a_damaged_ledger_is_a_usage_error_naming_it(routed, tmp_path, capsys, damage):
    ledger = tmp_path / "ledger"
    shutil.copytree(routed.ledger_path, ledger)
    if damage == "empty dev":
        (ledger / "refs" / "heads" / "dev").write_text("")
    elif damage == "dev on a missing commit":
        (ledger / "refs" / "heads" / "dev").write_text("1" * 40 + "\n")
    else:
        (ledger / "HEAD").write_text("garbage\n")
    code, _, err = report(capsys, str(ledger), "--out", str(tmp_path / "page.html"))
    assert code == 2 and "Traceback" not in err
    assert "ledger" in err and ("damaged" in err or "not an AgentDescent ledger" in err)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1), max_size=5))
def test_a_commits_keys_read_back_from_its_trailer_as_written(keys):
    """A file named "notes, draft.md" was read back from the `Keys` trailer as two keys."""
    from agentdescent.step.commit import keys_trailer, trailer_keys

    assert trailer_keys(keys_trailer(keys)) == keys and "\n" not in keys_trailer(keys)
