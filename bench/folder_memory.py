"""What a stored run of a large folder target holds in memory: the run's process's peak resident
set, for the support-router skill with N files of about 1 MB of text beside it (read by every
rollout, changed by none), side by side with the skill alone in the same run of this script.

The run is a stored one (`Service.start`, its own process): the python: stand-ins route by the
skill's files and propose one routing word a reflection, 2 workers, 2 rounds. The peak is the
process's VmHWM, read from /proc while it runs (Linux). Printed per target: its bytes, the peak,
the calls, and the peak per byte of target beyond the skill alone's.

Run: python bench/folder_memory.py [--bulk-files 19] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIVE = ("starting", "running")


def target(folder: Path, bulk_files: int) -> Path:
    """The support-router skill, with `bulk_files` text files of about 1 MB under references/."""
    skill = folder / ("bulk" if bulk_files else "skill")
    shutil.copytree(ROOT / "examples/skills/support-router", skill)
    line = "A reference line the router never needs, kept for the reader of this skill.\n"
    for n in range(bulk_files):
        (skill / "references").mkdir(exist_ok=True)
        (skill / "references" / f"bulk-{n:02d}.md").write_text(line * (999_000 // len(line)), encoding="utf-8")
    return skill


def peak_of(service, run_id: str) -> tuple[int, int]:
    """(the run's process's peak resident set in bytes, its calls), polled until the run ends."""
    peak, pid = 0, None
    while True:
        status = service.status(run_id)
        pid = status.pid or pid
        if pid is not None:
            try:
                fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
                peak = max(peak, int(fields["VmHWM"].split()[0]) * 1024)
            except (OSError, KeyError, ValueError):
                pass
        if status.state not in LIVE:
            if status.state != "finished":
                sys.exit(f"the run ended {status.state}: {status.message}")
            return peak, status.calls
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bulk-files", type=int, default=19)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not Path("/proc/self/status").exists():
        sys.exit("this benchmark reads /proc (Linux)")
    work = Path(tempfile.mkdtemp(prefix="agentdescent-bench-memory-"))
    os.environ["AGENTDESCENT_HOME"] = str(work / "home")
    from agentdescent.artifacts.tree import load_tree
    from agentdescent.runs import Service

    service, rows = Service(), []
    try:
        for bulk in (0, args.bulk_files):
            folder = target(work, bulk)
            size = sum(len(text.encode("utf-8")) for text in load_tree(folder).values())
            spec = {"target": str(folder), "name": "support-router", "scorer": "exact",
                    "tasks": {"file": str(ROOT / "examples/specs/support-router-tasks.jsonl"), "prompt": "request",
                              "gold": "team"},
                    "agent": "python:agentdescent.testing:route_by_skill",
                    "reflector": "python:agentdescent.testing:SkillReflector",
                    "editable": ["SKILL.md", "routing/*"], "frozen": ["hooks/*"], "n_workers": 2,
                    "rounds": args.rounds, "budget": {"max_calls": 5000}}
            started = time.monotonic()
            peak, calls = peak_of(service, service.start(spec).run_id)
            rows.append((bulk, size, peak, calls, time.monotonic() - started))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'bulk files':>10} {'target MB':>10} {'peak MB':>8} {'calls':>6} {'seconds':>8}")
    for bulk, size, peak, calls, seconds in rows:
        print(f"{bulk:>10} {size / 2**20:>10.1f} {peak / 2**20:>8.0f} {calls:>6} {seconds:>8.1f}")
    (_, small, small_peak, _, _), (_, large, large_peak, _, _) = rows
    print(f"peak per byte of target past the skill alone: {(large_peak - small_peak) / max(1, large - small):.1f}")


if __name__ == "__main__":
    main()
