"""What the verbs write to stdout as it is (`agentdescent.cli.plain`): `--json` records (`evolve`'s
too) into a pipe whose reader is gone end quietly, as the text verbs do, and a spec's problems are
capped; and `--version`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from tests.test_cli_verbs import ROOT, spec_file


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """The command with stdout a pipe whose reader closed before it wrote (`agentdescent ... | true`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "agentdescent", *args], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("verb", [["runs", "--json"], ["doctor", "--json"], ["plan", "SPEC", "--json"],
                                  ["plan", "BAD", "--json"], ["runs"]], ids=" ".join)
def test_a_reader_that_closes_early_ends_the_command_quietly(service, tmp_path, verb):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"target": "x", "tasks": [], "agent": "gpt-4"}), encoding="utf-8")
    given = {"SPEC": spec_file(tmp_path), "BAD": str(bad)}
    done = _into_a_closed_pipe(*(given.get(arg, arg) for arg in verb))
    assert done.returncode == 1 and done.stderr == ""


def test_plan_json_lists_the_first_problems_and_counts_them_all(service, tmp_path):
    """As the error message does: a spec of 190,000 frozen globs was 53 MB of JSON."""
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: skill\ndescription: answers\n---\nAnswer.\n", encoding="utf-8")
    many = spec_file(tmp_path, target=str(skill), frozen=["a"] * 500)  # each glob matches no file: a problem each
    done = subprocess.run([sys.executable, "-m", "agentdescent", "plan", many, "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    said = json.loads(done.stdout)
    assert done.returncode == 2 and len(said["problems"]) == 30 and said["problems_total"] >= 500
    assert f"the run spec has {said['problems_total']} problems" in done.stderr


def test_evolve_json_prints_the_started_run_s_record_for_a_script(service, tmp_path):
    """So that a script need not read the run's id out of "started run X"."""
    done = subprocess.run([sys.executable, "-m", "agentdescent", "evolve", spec_file(tmp_path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout)
    assert started["state"] == "starting" and service.status(started["run_id"]).id == started["run_id"]
    assert started["folder"] == str(service.store.get(started["run_id"]).path) and started["next"]
    both = subprocess.run([sys.executable, "-m", "agentdescent", "resume", started["run_id"], "--json", "--watch"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and both.stdout == "" and "--json" in both.stderr and "--watch" in both.stderr


def test_version_prints_the_package_s_version():
    done = subprocess.run([sys.executable, "-m", "agentdescent", "--version"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (0, f"agentdescent {metadata.version('agentdescent')}\n")
