"""What the verbs write to stdout as it is (`agentdescent.cli.plain`): `--json` records into a pipe
whose reader is gone end quietly, as the text verbs do, and a spec's problems are capped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
