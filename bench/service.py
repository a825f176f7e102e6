"""The service's own costs, measured side by side: how long `evolve` takes to answer, how long
`status` takes while a run is busy, and what a detached run costs over an in-process `evolve()`
of the same run (the demo's router domain, as models a spec names).

Run: python bench/service.py [--repeats 3] [--rounds 12] [--status-calls 200]

Each figure is measured in this one process, against a store of its own in a temporary folder.
`evolve` is timed through the MCP server (in-process, the SDK's client) when the server imports,
and through the service (`Service.start`) always; the detached run's overhead is its wall time
from `start` to a finished status, less the wall time of `evolve()` on the same parts in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)  # the run's process imports the demo's models from where it is started

from agentdescent.engine.evolve import evolve  # noqa: E402
from agentdescent.runs import Service, build, read_spec, wiring  # noqa: E402
from agentdescent.runs.status import LIVE  # noqa: E402
from agentdescent.testing import demo_strategy, router_tasks  # noqa: E402


def demo_spec(folder: Path, rounds: int) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "router.md"
    target.write_text(demo_strategy("append").render({}) + "\n", encoding="utf-8")
    tasks = [t.model_dump() for t in router_tasks(0)]
    return {"target": str(target), "tasks": tasks, "agent": "python:agentdescent.testing:route_prompt",
            "reflector": "python:agentdescent.testing:RouterReflectorModel", "strategy": "append", "n_workers": 8,
            "rounds": rounds, "target_reward": 1.0}


def wait(service: Service, run_id: str, states: tuple[str, ...] = LIVE) -> float:
    while service.status(run_id).state in states:
        time.sleep(0.01)
    return time.perf_counter()


def detached_vs_in_process(folder: Path, rounds: int) -> tuple[float, float, int, int, float]:
    """(detached seconds, in-process seconds, detached calls, in-process calls, the detached run's
    start-up: from `start` until its process reports running) of one run."""
    service = Service()
    folder.mkdir(parents=True, exist_ok=True)
    spec = demo_spec(folder, rounds)
    began = time.perf_counter()
    run = service.start(spec).run_id
    startup = wait(service, run, ("starting",)) - began
    detached = wait(service, run) - began
    calls = service.status(run).calls
    checked = read_spec(spec)
    parts = build.materials(checked)
    run_fn, propose = wiring.callables(checked, parts, make_agent=lambda agent, role: wiring.make_client(agent),
                                      workdir=folder / "ws")
    began = time.perf_counter()
    result = evolve(parts.tasks, build.reward(checked), run=run_fn, propose=propose, strategy=parts.strategy,
                    store=folder / "ledger", **checked.evolve_options())
    return detached, time.perf_counter() - began, calls, result.usage.calls, startup


def status_while_busy(folder: Path, calls: int) -> list[float]:
    """Milliseconds of each `status` call, made while a slowed run is busy."""
    service = Service()
    spec = demo_spec(folder, 200)
    spec["target_reward"] = None
    run = service.start(spec).run_id
    while service.status(run).state != "running":
        time.sleep(0.02)
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        service.status(run)
        times.append((time.perf_counter() - began) * 1000)
    service.cancel(run)
    return times


def evolve_tool_seconds(folder: Path) -> float | None:
    """Seconds the MCP `evolve` tool takes to answer (None when the server does not import)."""
    try:
        import anyio
        from agentdescent_mcp.server import server
        from mcp import Client
    except ImportError:
        return None
    spec = demo_spec(folder, 3)

    async def call() -> float:
        async with Client(server, mode="legacy") as client:
            began = time.perf_counter()
            answer = await client.call_tool("evolve", {"spec": spec})
            took = time.perf_counter() - began
            run_id = (answer.structured_content or json.loads(answer.content[0].text))["run_id"]
            await client.call_tool("cancel", {"run_id": run_id})
            return took

    return anyio.run(call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--status-calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AGENTDESCENT_HOME"] = str(Path(tmp) / "home")
        starts, rows = [], []
        for i in range(args.repeats):
            began = time.perf_counter()
            run = Service().start(demo_spec(Path(tmp) / f"start{i}", 3)).run_id
            starts.append(time.perf_counter() - began)
            Service().cancel(run)
            rows.append(detached_vs_in_process(Path(tmp) / f"run{i}", args.rounds))
        status_ms = sorted(status_while_busy(Path(tmp) / "busy", args.status_calls))
        tool = evolve_tool_seconds(Path(tmp) / "tool")
    overhead = statistics.median(detached - local for detached, local, *_ in rows)
    print(f"service costs ({args.repeats} repeats, demo router domain, 8 workers, up to {args.rounds} rounds)")
    print(f"  Service.start answer            median {statistics.median(starts) * 1000:7.1f} ms   (target < 2000 ms)")
    if tool is None:
        print("  MCP evolve tool answer          (agentdescent_mcp does not import: not measured)")
    else:
        print(f"  MCP evolve tool answer                 {tool * 1000:7.1f} ms   (target < 2000 ms, in-process client)")
    print(f"  status while a run is busy      median {statistics.median(status_ms):7.2f} ms, "
          f"p95 {status_ms[int(len(status_ms) * 0.95)]:.2f} ms over {len(status_ms)} calls   (target < 100 ms)")
    for detached, local, calls_detached, calls_local, startup in rows:
        print(f"  detached {detached:5.2f} s ({calls_detached} calls; {startup:4.2f} s of it starting the process) "
              f"vs in-process {local:5.2f} s ({calls_local} calls)")
    print(f"  detached-run overhead           median {overhead:5.2f} s   (target < 1.5 s)")


if __name__ == "__main__":
    main()
