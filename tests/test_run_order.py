"""Which run is the latest (what a verb given no RUN takes): the one made last, by the number each
run is given as it is made, whatever a clock set wrong or a copy that did not keep file times made
of its files' times; runs made before runs were numbered still list, first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from agentdescent.runs.order import MADE
from tests import keyword_domain as domain
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]


def finished_run(service, folder: Path) -> str:
    folder.mkdir()
    run = service.start(domain.spec(folder)).run_id
    wait(service, run)
    return run


def moved_in_time(folder: Path, seconds: float) -> None:
    """Every file of `folder` (and it) with its times `seconds` from now, as a clock that was that far off
    would have left them."""
    when = time.time() + seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


def bare_status() -> str:
    """What `agentdescent status`, given no RUN, says first: which run it took."""
    done = subprocess.run([sys.executable, "-m", "agentdescent", "status"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[0]


def test_the_latest_run_is_the_one_made_last_whatever_the_times_of_its_files(service, tmp_path):
    older = finished_run(service, tmp_path / "a")
    newer = finished_run(service, tmp_path / "b")
    folder = service.store.get(older).path
    moved_in_time(folder, 86_400)  # made while the clock was a day ahead
    assert [run.id for run in service.runs()] == [older, newer]
    assert bare_status() == f"run {newer} (the latest; give RUN for another)"

    backup = tmp_path / "backup"  # restored from a backup by a copy that keeps no file times (cp -r)
    shutil.copytree(folder, backup)
    shutil.rmtree(folder)
    shutil.copytree(backup, folder, copy_function=shutil.copyfile)
    assert [run.id for run in service.runs()] == [older, newer]


def test_runs_made_before_runs_were_numbered_list_first_by_their_specs_time(service, tmp_path):
    first, second = finished_run(service, tmp_path / "a"), finished_run(service, tmp_path / "b")
    for run in (first, second):
        service.store.get(run).file(MADE).unlink()
    moved_in_time(service.store.get(first).path, 86_400)
    assert [run.id for run in service.runs()] == [second, first]  # as their specs' times say

    third = finished_run(service, tmp_path / "c")
    assert [run.id for run in service.runs()] == [second, first, third]
    assert bare_status() == f"run {third} (the latest; give RUN for another)"
