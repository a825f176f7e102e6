"""Start-up: what a CLI verb and the MCP server pay before they do anything.

Each figure is the best of `--repeats` fresh interpreters (the least disturbed by the machine's
other work), taken in turns after one round that is not counted, with bytecode caches written and
read as an installed package has them (PYTHONDONTWRITEBYTECODE is dropped), all of this one Python
and of this checkout's code:

- the import of the CLI's module (`agentdescent.cli.main`, which the `agentdescent` command loads
  first) and of the MCP server's (`agentdescent_mcp.server`), timed inside the interpreter, and
  beside them the MCP SDK's own server module, which the server's import includes;
- the wall time of `agentdescent --help` and of `agentdescent runs` on an empty run store;
- the wall time from starting the MCP server (`python -m agentdescent_mcp`, what `agentdescent-mcp`
  runs) to its answer to `tools/list`, through the MCP SDK's stdio client, which sends `initialize`
  first: what a host waits for before its first tool call.

Run: python bench/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every interpreter started here imports the package from this checkout, the MCP server's folder too.
PATH = os.pathsep.join([str(ROOT), str(ROOT / "mcp_server"), *filter(None, [os.environ.get("PYTHONPATH")])])
TIMED_IMPORT = "import sys, time; t = time.perf_counter(); import {0}; print(time.perf_counter() - t)"


def imported(module: str, env: dict[str, str]) -> float:
    """Seconds a fresh interpreter takes to import `module`."""
    done = subprocess.run([sys.executable, "-c", TIMED_IMPORT.format(module)], env=env, capture_output=True,
                          text=True, check=True)
    return float(done.stdout)


def command(args: list[str], env: dict[str, str]) -> float:
    """Wall seconds of `python -m agentdescent ARGS`, as the `agentdescent` command runs it."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "agentdescent", *args], env=env, capture_output=True, check=True)
    return time.perf_counter() - began


def tools_listed(env: dict[str, str]) -> float:
    """Wall seconds from starting the MCP server to its `tools/list` answer, through the SDK's client."""
    import anyio
    import mcp

    server = mcp.StdioServerParameters(command=sys.executable, args=["-m", "agentdescent_mcp"], env=env)

    async def main() -> float:
        began = time.perf_counter()
        async with mcp.Client(server, mode="legacy") as client:  # connecting sends initialize
            tools = (await client.list_tools()).tools
        assert tools, "the server listed no tools"
        return time.perf_counter() - began

    return anyio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters a figure, the best kept (default 5)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    with tempfile.TemporaryDirectory() as home:
        env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=PATH, AGENTDESCENT_HOME=home)
        measures = {
            "import agentdescent.cli.main": lambda: imported("agentdescent.cli.main", env),
            "import agentdescent_mcp.server": lambda: imported("agentdescent_mcp.server", env),
            "  of it, the MCP SDK (mcp.server.mcpserver)": lambda: imported("mcp.server.mcpserver", env),
            "agentdescent --help": lambda: command(["--help"], env),
            "agentdescent runs (an empty store)": lambda: command(["runs"], env),
            "MCP server: start, initialize, tools/list": lambda: tools_listed(env),
        }
        seen: dict[str, list[float]] = {what: [] for what in measures}
        for _ in range(args.repeats + 1):  # in turns, so that a burst of the machine's other work touches each alike
            for what, measure in measures.items():
                seen[what].append(measure())
    print(f"start-up, best of {args.repeats} fresh interpreters (Python {sys.version.split()[0]}):")
    for what, seconds in seen.items():
        print(f"  {what:45s} {min(seconds[1:]) * 1000:7.0f} ms")  # the first round writes the bytecode caches
    print(f"load average over the last 1 / 5 / 15 minutes: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores (more than the cores: the times above shared the machine)")


if __name__ == "__main__":
    main()
