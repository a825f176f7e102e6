"""What the command shows, rendered into a console of a given width (80 columns unless a test
says): the live view fed events by hand, and the end report of a result built by hand."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console
from rich.text import Text

from agentdescent import events as ev
from agentdescent.artifacts.strategies import AppendRules, rule_key
from agentdescent.cli.diffs import diff_outcomes, edit_text
from agentdescent.cli.report import Timing, report
from agentdescent.cli.terminal import coloured, console_for
from agentdescent.cli.views import ProgressView, Seen, plural
from agentdescent.cli.watch import follow, say
from agentdescent.result import EvolveResult, StepRecord
from agentdescent.runs.status import RunStatus
from agentdescent.types import Diff, Edit, Outcome
from agentdescent.usage import Usage

KEPT, ADDED, DROPPED = "When a request mentions 'bug', route it to technical.", \
    "When a request mentions 'refund', route it to returns.", "When a request mentions 'help', route it to billing."
STRATEGY = AppendRules(header="Routing rules:")
LEDGER = "/tmp/a-ledger-folder-whose-name-is-long-enough-that-the-git-command-is-past-eighty-columns"


def console(width: int = 80) -> Console:
    return Console(file=io.StringIO(), width=width)


def text_of(screen: Console) -> str:
    return screen.file.getvalue()


def started(rounds: int = 3, **fields) -> ev.RunStarted:
    return ev.RunStarted(rounds=rounds, n_workers=2, train=20, held_out=8, version=1, ledger=LEDGER, **fields)


def rules(*texts: str) -> dict[str, str]:
    return {rule_key(t): t for t in texts}


def diff(diff_id: str, *edits: Edit, author: str = "w0") -> Diff:
    return Diff(id=diff_id, artifact_id="artifact", base_version=1, edits=list(edits), author=author)


def outcome(d: Diff, kind: str, step: int, reason: str) -> Outcome:
    return Outcome(diff_id=d.id, kind=kind, reason=reason, step=step, author=d.author)


ADD = diff("d0000000001", Edit(key=rule_key(ADDED), before=None, after=ADDED))
REMOVE = diff("d0000000002", Edit(key=rule_key(DROPPED), before=DROPPED, after=None), author="w1")
REJECT = diff("d0000000003", Edit(key=rule_key("x"), before=None, after="When a request mentions 'please', route it to account."))
RUN = [
    (ADD, outcome(ADD, "committed", 0, "landed in version 2 (P(improve)=1.00 (bar 0.70), +6/-0 on 20 tasks)")),
    (REMOVE, outcome(REMOVE, "committed", 1, "landed in version 3 (P(improve)=0.91 (bar 0.70), +2/-0 on 20 tasks)")),
    (REJECT, outcome(REJECT, "rejected_by_test", 1, "rejected: P(improve)=0.10 (bar 0.70), +0/-4 on 20 tasks")),
]


def result(**fields) -> EvolveResult:
    """A run that started from two rules, added one, and removed one of the two."""
    initial, final = rules(KEPT, DROPPED), rules(KEPT, ADDED)
    values = dict(
        rendered=STRATEGY.render(final), state=final, final_reward=0.9, initial_reward=0.4, ledger_path=Path(LEDGER),
        history=[StepRecord(round=0, base_version=1, version=2), StepRecord(round=1, base_version=2, version=3)],
        outcome_list=[o for _, o in RUN], usage=Usage(), stop_reason="ran all 2 rounds", version=3,
        initial_version=1, initial_state=initial, warnings=["every rollout so far failed: boom"],
    )
    return EvolveResult(**{**values, **fields})


def seen_run() -> Seen:
    view = ProgressView(console())
    with view:
        view.on_event(started())
        for d, o in RUN:
            view.on_event(ev.DiffOutcome(round=o.step, outcome=o, diff=d))
    return view.seen


def reported(limit: int | None = 3, width: int = 80, **fields) -> str:
    screen = console(width)
    report(screen, result(**fields), STRATEGY, seen_run(), Timing(evolution=0.25, command=1.5), limit=limit)
    return text_of(screen)


def test_the_view_says_which_ledger_it_writes():
    for fields, said in [
        ({"temporary": True}, f"new ledger at {LEDGER} (a temporary folder)"),
        ({}, f"new ledger at {LEDGER}"),
        ({"continued_from": 7}, f"continuing the ledger at {LEDGER} from version 7"),
        ({"continued_from": 7, "resumed_round": 2}, "resuming an interrupted run at round 3"),
    ]:
        screen = console()
        with ProgressView(screen) as view:
            view.on_event(started(**fields))
        assert said in text_of(screen).splitlines()[0]  # whole, on one line, though past 80 columns


def test_a_warning_is_printed_as_it_arrives_above_the_bar():
    screen = console()
    with ProgressView(screen) as view:
        view.on_event(started())
        view.on_event(ev.Warned(message="the ledger's artifact was last written by strategy AppendRules"))
        view.on_event(ev.RoundEnded(round=0, calls=10))
    lines = text_of(screen).splitlines()
    assert lines[1:] == ["evolving: at most 3 rounds, train 20 / held-out 8 tasks",
                         "warning: the ledger's artifact was last written by strategy AppendRules",
                         "round 1 of 3 done: 10 calls"]  # not a terminal (a pipe, a log): a line a round


def test_a_terminal_gets_a_bar_of_rounds_done_out_of_the_most():
    screen = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    with ProgressView(screen) as view:
        view.on_event(started(rounds=1))
        view.on_event(ev.RoundEnded(round=0, calls=10))
        view.on_event(ev.RunEnded(reason="ran all 1 rounds", final_reward=1.0))
    assert "1/1 round " in text_of(screen) and "round 1 of" not in text_of(screen)


def test_a_stop_reason_quoting_outside_text_is_shown_as_written_not_read_as_markup():
    """A server's error body holding "[/bold]" ended `evolve --watch` in a MarkupError, and a
    "[link=...]" in an agent's error became a hyperlink whose text was not its target."""
    screen = Console(file=io.StringIO(), width=200, force_terminal=True, color_system="truecolor")
    reason = "every rollout failed: «HTTP 400 [/bold] see [link=https://evil.example/fix]docs[/link]»"
    with ProgressView(screen) as view:
        view.on_event(started(rounds=1))
        view.on_event(ev.RunEnded(reason=reason, final_reward=0.0))
    shown = text_of(screen)
    assert "[/bold]" in shown and "[link=https://evil.example/fix]docs[/link]" in shown and "\x1b]8;" not in shown


def test_the_view_keeps_each_diff_by_id():
    assert seen_run().diffs == {d.id: d for d, _ in RUN}


def test_the_report_has_a_legend():
    out = reported()
    assert "before / after: the mean reward on the 8 held-out tasks" in out
    assert "rounds: aggregator steps run (at most 3)" in out
    assert "calls: rollouts and proposals, each one model call for a real model" in out
    assert "time: the evolution alone (the whole command: 1.50 s so far" in out
    assert "P(improve)=p (bar b), +w/-l on n tasks: p is the posterior probability" in out


def test_the_learned_change_names_its_versions_and_shows_removals():
    out = reported()
    assert "--- version 1 (start)\n+++ version 3 (after 2 commits)\n" in out
    assert f"\n-- {DROPPED}\n" in out and f"\n+- {ADDED}\n" in out and f"\n - {KEPT}\n" in out


def test_commits_past_the_result_are_explained():
    out = reported(history=[StepRecord(round=0, base_version=1, version=2), StepRecord(round=1, base_version=2, version=3)],
                   version=2)
    assert "+++ version 2 (after 1 commit)" in out
    assert "This run committed up to version 3" in out.replace("\n", " ")


def test_every_diff_shows_its_change_and_reason():
    out = reported(limit=None, width=160)  # wide enough that no row wraps
    assert "removes When a request mentions 'help', route it to billing." in out
    assert "adds When a request mentions 'refund', route it to returns." in out
    assert all(d.id in out for d, _ in RUN) and "not listed" not in out
    assert "1 landed diff removed text (round 2)" in out
    assert "committed: 2 diffs" in out and "rejected_by_test: 1 diff" in out


def test_a_short_list_keeps_every_landed_removal_and_says_how_to_see_all():
    screen = console()
    diff_outcomes(screen, result(), STRATEGY, seen_run(), limit=0)
    out = text_of(screen)
    assert REMOVE.id in out and ADD.id not in out and REJECT.id not in out
    assert "2 more diffs not listed: --all-diffs lists every one." in out


def test_a_diff_the_events_did_not_carry_shows_its_reason():
    screen = console()
    diff_outcomes(screen, result(), STRATEGY, Seen(), limit=None)
    assert "landed in version 3" in text_of(screen) and "removes" not in text_of(screen)


def test_the_ending_repeats_warnings_and_never_breaks_the_command():
    lines = reported().splitlines()
    assert "Stopped: ran all 2 rounds." in lines
    assert "1 warning:" in lines and any("every rollout so far failed: boom" in line for line in lines)
    assert f"  git -C {LEDGER} log --stat dev" in lines
    assert all(len(line) <= 80 for line in lines if LEDGER not in line)


def test_no_diffs_says_so():
    screen = console()
    diff_outcomes(screen, result(outcome_list=[]), STRATEGY, Seen())
    assert text_of(screen) == "No diffs were proposed.\n"


def test_edits_read_as_what_they_do():
    def said(edit: Edit, show_key: bool = True) -> str:
        return edit_text(edit, show_key).plain

    assert said(Edit(key="billing", before="invoice", after="invoice, fee")) == "changes billing: invoice → invoice, fee"
    assert said(Edit(key="billing", before="", after="invoice")) == "adds billing: invoice"
    assert said(Edit(key="rule-1", before="Be brief.", after=None), show_key=False) == "removes Be brief."
    assert said(Edit(key="p", before="a\nb\n", after="a\nc\n")) == "changes p:\n- b\n+ c"


def test_plural():
    assert [plural(n, "worker") for n in (0, 1, 8)] == ["0 workers", "1 worker", "8 workers"]


def test_control_characters_from_a_model_are_shown_never_sent_to_the_terminal():
    screen = io.StringIO()
    console = console_for(screen, force_terminal=True, color_system="standard", width=200)
    hostile = "rule: \x1b]52;c;ZXZpbA==\x07 then \x1b[2J\x9b31m"  # the clipboard written, the screen cleared
    console.print(Text(hostile, style="green"))
    say(console, f"error: the reply was {hostile}")
    out = screen.getvalue()
    assert "rule: \\x1b]52;c;ZXZpbA== then \\x1b[2J\\x9b31m" in out  # a Text built by hand: rich dropped its bell
    assert "error: the reply was rule: \\x1b]52;c;ZXZpbA==\\x07 then \\x1b[2J\\x9b31m" in out
    assert "\x1b]52" not in out and "\x1b[2J" not in out and "\x9b" not in out
    assert "\x1b[32m" in out  # the style rich adds still colours the line


def test_the_control_characters_rich_deletes_as_it_builds_a_text_are_shown_as_escapes_too():
    """Rich's Text deletes BEL, BS, VT, FF and CR before the console's hook sees them: a context line
    `approve\\rreject` showed as "approvereject", and backspaces hid what stood before them."""
    screen = io.StringIO()
    console = console_for(screen, force_terminal=True, color_system=None, width=200)
    say(console, "[CR:visible\rHIDDEN] [BS:abc\x08\x08\x08XYZ] [BEL:\x07] [VT:\x0b] [FF:\x0c]")
    console.print(coloured("@@ -1 +1 @@\n approve\x08\x07reject\n-x\r\n+x\n"), soft_wrap=True)
    console.print(edit_text(Edit(key="k", before="a\rb", after="a\rc"), show_key=False))
    console.print("[bold]markup[/bold] still read, a\rb")
    assert screen.getvalue().split("\n")[:6] == [
        "[CR:visible\\x0dHIDDEN] [BS:abc\\x08\\x08\\x08XYZ] [BEL:\\x07] [VT:\\x0b] [FF:\\x0c]",
        "@@ -1 +1 @@", " approve\\x08\\x07reject", "-x\\x0d", "+x", "changes a\\x0db → a\\x0dc"]
    assert "\nmarkup still read, a\\x0db\n" in screen.getvalue()


def test_status_says_how_many_calls_failed_and_the_first_reason():
    """Each failed call is a rollout scored 0: unseen, it reads as a skill that does badly."""
    from agentdescent.cli.verbs import _failures
    from agentdescent.runs.status import RunStatus

    assert _failures(RunStatus(calls=187)) == []
    said = _failures(RunStatus(calls=187, failures=88, failure="claude_code failed (exit code 1): rate limited"))
    assert said == ["  failed calls: 88 of 187, each scored 0; the first: claude_code failed (exit code 1): rate limited"]


def terminal(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)


def screen_lines(screen: Console) -> list[str]:
    """What a terminal shows at the end: each redraw of the bar overwrites the one before."""
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", text_of(screen)).replace("\r", "\n")
    return [line.rstrip() for line in shown.split("\n") if line.strip()]


def test_at_80_columns_the_bar_keeps_rounds_time_and_calls_whole_and_the_stop_reason_goes_below_it():
    """The probe's demo ended `evolving ━━━  4… rounds 0:… 570 calls reached target ...`."""
    screen = terminal(80)
    with ProgressView(screen) as view:
        view.on_event(started(rounds=30))
        view.on_event(ev.Evaluated(round=3, version=5, held_out_reward=1.0, promoted=True, best_reward=1.0))
        view.on_event(ev.Spent(calls=12345, tokens=0))
        for round_ in range(4):
            view.on_event(ev.RoundEnded(round=round_, calls=12345))
        view.on_event(ev.RunEnded(reason="reached target reward 1.0 (held-out 1.000)", final_reward=1.0))
    shown = screen_lines(screen)
    bar = [line for line in shown if line.startswith("evolving ")][-1]
    assert re.search(r" 4/30 rounds 0:00:0\d 12345 calls ", bar) and len(bar) <= 80, bar
    assert shown[-1] == "ended: reached target reward 1.0 (held-out 1.000)"  # whole, as a pipe gets it


def measured(round_: int, version: int, reward: float, best: float, promoted: bool = False,
             again: bool = False) -> ev.Evaluated:
    return ev.Evaluated(round=round_, version=version, held_out_reward=reward, promoted=promoted, best_reward=best,
                        again=again)


RESUMED_RUN = [  # a run killed after its first promotion, then resumed: the engine sends the start's figure again
    started(), measured(-1, 1, 0.32, 0.32), measured(1, 3, 0.52, 0.52, promoted=True),
    started(resumed_round=2), measured(-1, 1, 0.32, 0.52, again=True),
]


def test_a_resumed_run_shows_its_start_as_the_start_not_as_a_reward_that_fell_back():
    screen = console()
    with ProgressView(screen) as view:
        for event in [*RESUMED_RUN, measured(3, 5, 0.84, 0.84, promoted=True)]:
            view.on_event(event)
    lines = text_of(screen).splitlines()
    resumed = next(i for i, line in enumerate(lines) if line.startswith("resuming"))
    assert lines[resumed - 2:resumed] == ["held-out 0.320 at version 1", "held-out 0.520 at version 3 (promoted)"]
    assert lines[resumed + 2:] == ["held-out at the start 0.320 (version 1); best so far 0.520",
                                   "held-out 0.840 at version 5 (promoted)"]

    screen = terminal(100)
    with ProgressView(screen) as view:
        for event in RESUMED_RUN:
            view.on_event(event)
    bar = [line for line in screen_lines(screen) if line.startswith("evolving ")][-1]
    assert bar.endswith("held-out best 0.520") and "0.320" not in bar


def test_the_clock_is_the_run_s_from_its_start_not_the_viewer_s():
    """`watch` showed a finished 56 s run as 0:00:00, and a live run it joined as starting then."""
    screen = terminal(100)
    with ProgressView(screen, since=time.time() - 30) as view:  # a run that started 30 s before the watcher joined
        view.on_event(started())
    assert re.search(r" 0:00:3[01] ", [line for line in screen_lines(screen) if line.startswith("evolving ")][-1])


def test_watch_shows_a_finished_run_s_duration(tmp_path):
    """From the run's creation to its last event, however long after the watcher reads it."""
    created = time.time() - 3600
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(ev.to_json(e)) + "\n" for e in (
        started(rounds=2), ev.RoundEnded(round=0, calls=10), ev.RunEnded(reason="ran all 2 rounds", final_reward=1.0))),
        encoding="utf-8")
    os.utime(events, (created + 56, created + 56))
    run = SimpleNamespace(id="r", file=tmp_path.joinpath)
    service = SimpleNamespace(store=SimpleNamespace(get=lambda _: run),
                              status=lambda _: RunStatus(id="r", state="finished", created=created))
    screen = terminal(100)
    assert follow(service, "r", screen).state == "finished"
    assert " 1/2 rounds 0:00:56 " in [line for line in screen_lines(screen) if line.startswith("evolving ")][-1]


def test_at_40_columns_the_report_cuts_nothing_and_its_diff_lines_keep_their_marks():
    """A wrapped diff line lost its `+` (its rest read as context), `(P(improve…` lost the figure,
    the table's headers read `befo…`."""
    out = reported(limit=None, width=40)
    lines = out.splitlines()
    assert f"+- {ADDED}" in lines and f"-- {DROPPED}" in lines and f" - {KEPT}" in lines  # whole, as `show` prints them
    assert "…" not in out and "before" in out and "rounds" in out
    assert "P(improve)=0.91" in out.replace("\n", "").replace(" ", "")  # folded across lines, every character there
