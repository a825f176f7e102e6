"""A write-back in a process of its own, for the tests that kill it, starve it or race it.

    python -m tests.writeback_child SPEC TARGET --ready FD     write_to(TARGET) once a byte is on FD
    python -m tests.writeback_child SPEC TARGET --fsize BYTES  write_to(TARGET) with files capped at BYTES

SPEC is a JSON file {"rendered": text or {path: text}, "initial": {path: text}, "frozen": [...]}.
It prints nothing; a UserError exits 3 with its message on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
from pathlib import Path

from agentdescent.errors import UserError
from agentdescent.result import EvolveResult
from agentdescent.usage import Usage


def result_of(rendered, initial=None, frozen=()) -> EvolveResult:
    """An EvolveResult holding `rendered` (the final artifact) and `initial` (the artifact when the
    run started), as `evolve` would return it, without a run."""
    state = dict(rendered) if isinstance(rendered, dict) else {"slot": rendered}
    return EvolveResult(rendered=rendered, state=state, final_reward=1.0, initial_reward=0.0, history=[],
                        ledger_path=Path("unused-ledger"), outcome_list=[], usage=Usage(), stop_reason="rounds",
                        version=1, initial_version=0, initial_state=dict(initial or {}), frozen=tuple(frozen))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("target")
    parser.add_argument("--ready", type=int, help="a pipe's fd to write one byte to just before write_to")
    parser.add_argument("--fsize", type=int, help="the largest file this process may write, in bytes")
    args = parser.parse_args()
    spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
    result = result_of(spec["rendered"], spec.get("initial"), spec.get("frozen", ()))
    if args.fsize is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    if args.ready is not None:
        os.write(args.ready, b"r")
        os.close(args.ready)
    try:
        result.write_to(args.target)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
