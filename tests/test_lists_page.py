"""The answers whose lists grow with the target, on a page a host shows whole (runs/lists_page.py):
each list its first entries and its total, whatever the names' length, and where the whole lists are."""

from __future__ import annotations

from agentdescent.runs import lists_page
from agentdescent.runs.hostfiles import sent_bytes
from agentdescent.runs.hostwork import PAGE_BYTES
from agentdescent.runs.status import RunStatus
from agentdescent.runs.verdict import LISTS, Accepted


def answer(names: int, length: int, **fields) -> Accepted:
    paths = [f"{i:04d}-" + "n" * length for i in range(names)]
    lists = {name: list(range(names)) if name == "removed" else paths for name in LISTS}
    return Accepted(run_id="r-1", dry_run=False, target="/t", **lists, **{f"{name}_total": names for name in LISTS},
                    message="wrote /t", **fields)


def test_every_list_of_an_accept_is_cut_to_its_first_entries_and_says_where_the_rest_are():
    for names, length in ((400, 60), (30, 250), (5, 2_000)):  # many names, long names, a few too long for a page
        done = answer(names, length, answer_file="/store/runs/r-1/accepted.json")
        page = lists_page.accepted(done)
        assert sent_bytes(page) <= PAGE_BYTES, (names, length)
        for name in LISTS:
            assert getattr(page, name) == getattr(done, name)[:len(getattr(page, name))]
            assert getattr(page, f"{name}_total") == names
        assert page.message.startswith("wrote /t")
        assert any(len(getattr(page, name)) < names for name in LISTS)  # by count, or by the names' length
        assert page.message.endswith("/store/runs/r-1/accepted.json holds every one")
    dry = lists_page.accepted(answer(400, 10).model_copy(update={"dry_run": True}))
    assert dry.message.endswith("agentdescent accept --dry-run r-1 lists every one") and len(dry.kept) == 20


def test_an_answer_that_fits_is_sent_as_it_is():
    done = answer(3, 10, answer_file="/store/runs/r-1/accepted.json")
    assert lists_page.accepted(done) == done


def test_a_status_names_the_first_paths_its_write_back_left_and_counts_them_all():
    wrote = {f"notes/{i:04d}-" + "n" * 200 + ".md": "file " + "0" * 64 for i in range(300)}
    page = lists_page.status(RunStatus(id="r-1", state="accepted", target="/t", wrote=wrote, wrote_total=300))
    assert sent_bytes(page) <= PAGE_BYTES and page.wrote_total == 300
    assert 0 < len(page.wrote) <= lists_page.SHOWN and list(page.wrote) == list(wrote)[:len(page.wrote)]
    older = RunStatus(id="r-1", state="accepted", target="/t", wrote=dict(list(wrote.items())[:3]))  # no total stored
    assert lists_page.status(older).wrote_total == 3 and lists_page.status(older).wrote == older.wrote


def test_a_status_of_a_run_that_warned_of_many_things_keeps_its_first_warnings_and_counts_the_rest():
    warnings = [f"warning {i}: " + "w" * 900 for i in range(30)]
    page = lists_page.status(RunStatus(id="r-1", state="finished", target="/t", warnings=warnings))
    kept = len(page.warnings) - 1
    assert sent_bytes(page) <= PAGE_BYTES and 0 < kept < 30 and page.warnings[:kept] == warnings[:kept]
    assert page.warnings[-1] == f"... and {30 - kept} more warnings: agentdescent status r-1 prints them all"
    few = RunStatus(id="r-1", state="finished", target="/t", warnings=warnings[:2])
    assert lists_page.status(few) == few
