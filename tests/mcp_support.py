"""What the MCP server's tests share: calling a tool through an SDK client and reading its
structured answer or its error, waiting on a run's state, and the specs the tests run."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import StdioServerParameters

from agentdescent.runs.hostfiles import sent_bytes

REPO = Path(__file__).resolve().parent.parent
ENDED = ("finished", "failed", "cancelled", "interrupted", "accepted", "rejected")


def program_env(home: Path, tmp_path: Path) -> dict[str, str]:
    """The environment a host gives `agentdescent-mcp`: a HOME and run store of the test's own, the
    program's folder on PATH, and the test's PYTHONPATH when it has one, so that the program (and
    every process it starts) imports the code under test rather than another installed copy."""
    program = Path(sys.executable).with_name("agentdescent-mcp")
    env = {"AGENTDESCENT_HOME": str(home), "HOME": str(tmp_path),
           "PATH": os.pathsep.join([str(program.parent), os.environ.get("PATH", "")])}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def stdio_server(home: Path, tmp_path: Path, *, cwd: Path = REPO, **env: str) -> StdioServerParameters:
    """`agentdescent-mcp` as a host starts it, in `cwd`, with `program_env` and `env` on top."""
    return StdioServerParameters(command="agentdescent-mcp", env={**program_env(home, tmp_path), **env}, cwd=str(cwd))


async def call(client: mcp.Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The tool's structured answer; fails the test when the tool answered with an error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content[0].text}"
    assert result.structured_content is not None, f"{tool} gave no structured content"
    text = result.content[0].text  # what a host's model reads: the pages are measured in it (hostfiles.sent_bytes)
    assert json.loads(text) == result.structured_content and len(text.encode()) == sent_bytes(result.structured_content)
    return result.structured_content


async def fails(client: mcp.Client, tool: str, **arguments: Any) -> str:
    """The text of the tool error the call must end in."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed, it answered {result.structured_content}"
    return result.content[0].text


async def wait_for(client: mcp.Client, run_id: str, states: tuple[str, ...], timeout: float = 90.0) -> dict[str, Any]:
    """Poll status until the run is in one of `states`; its status."""
    deadline = time.monotonic() + timeout
    while True:
        status = await call(client, "status", run_id=run_id)
        if status["state"] in states:
            return status
        assert time.monotonic() < deadline, f"run {run_id} still {status['state']} after {timeout:g} s: {status}"
        await anyio.sleep(0.1)


def demo_spec(target: Path) -> dict[str, Any]:
    """The shipped support-router spec on a copy of the skill, small enough for a test."""
    return {
        "target": str(target),
        "tasks": {"file": str(REPO / "examples/specs/support-router-tasks.jsonl"), "prompt": "request", "gold": "team"},
        "scorer": "exact",
        "agent": "python:examples.skill_dir_evolution:route_by_skill",
        "reflector": "python:examples.skill_dir_evolution:SkillReflector",
        "prompt": "Use the support-router skill. Which team handles this request? Answer with the team's name only."
                  "\n\n{task}",
        "name": "support-router", "editable": ["SKILL.md", "routing/*"], "frozen": ["hooks/*"],
        "n_workers": 2, "rounds": 2, "budget": {"max_calls": 2000},
    }


def text_spec(target: Path, *, agent: str, reflector: str, rounds: int = 2) -> dict[str, Any]:
    """A prompt file evolved on 12 questions whose answer is 2026 (none of them says "year")."""
    tasks = [{"id": f"q{i:02d}", "prompt": f"When did it happen? (case {i})", "gold": "2026"} for i in range(12)]
    return {"target": str(target), "tasks": tasks, "scorer": "exact", "agent": agent, "reflector": reflector,
            "n_workers": 2, "rounds": rounds, "host_timeout": 120}
