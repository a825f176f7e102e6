"""What a host-driven run costs the host: model requests and input tokens, through the real Claude Code or Codex.

With `--host claude` (the default) the pinned `claude` CLI runs `/agentdescent:evolve <skill>
<tasks>` with the plugin from this repository; with `--host codex` the pinned `codex exec` runs
"Evolve <skill> with AgentDescent, against the tasks in <tasks>" with the server and skill
`agentdescent install codex` wires into a throwaway CODEX_HOME. Either talks to a scripted model
on loopback that follows SKILL.md as a model would (`host_models`): plan, evolve (a spec with
`agent: host` and `reflector: host`, what is measured, whatever plan says of the cheaper path this
machine has), the run's rollouts and reflections through `host_next` / `host_submit`, and `show`
once the run has ended. Two helpers started in one message do that work with the prompts
SKILL.md gives word for word: in Claude Code with the Agent tool, in Codex with `spawn_agent`
(the main conversation then waits with `wait_agent`). Rollouts are answered from each
candidate's files (one shell call a candidate whose files did not come) as the skill says
(`route_by_skill`, the offline agent of the directory quickstart), reflections as the
quickstart's reflector does. The skill is a copy of `examples/skills/support-router` with the
first `--tasks` of its tasks.

Printed: the model requests the host made (each conversation, side requests), the input tokens
they carried (estimated: a request's system prompt or instructions, its messages or input items
and its tool definitions, at four characters a token), each conversation's share of them and
which of those three parts carried them, the largest request, the run's held-out reward and
calls, and the time.

With `--p`/`--q` the rollouts' answers are samples (right with p where the files route the
request right, with q where not), and `--harm`/`--vague` set the reflector's shares of filler
words and of no answer. Every run is also read on ground truth, off the routing files its result
holds: the tasks' signal words listed under their own team, filler words kept, tasks routed right.

Run: python bench/host_cost.py [--host claude|codex] [--tasks 36] [--workers 2] [--rounds 4] [--seeds 0 1 2]
     python bench/host_cost.py --p 0.85 --q 0.1 --harm 0.15 --vague 0.25 --seeds 0 1 2 3 4 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # the package, tests' servers, host_models

from host_models import PARTS, PREFIX, TOOLS, ClaudeHost, CodexHost, ScriptedHost  # noqa: E402

from agentdescent.hosts import codex as codex_wiring  # noqa: E402
from agentdescent.result import EvolveResult  # noqa: E402
from agentdescent.runs import Service  # noqa: E402
from agentdescent.testing import routing_truth  # noqa: E402
from agentdescent.types import Task  # noqa: E402
from tests.host_clis import PINNED  # noqa: E402
from tests.loopback import LoopbackServer  # noqa: E402
from tests.openai_responses import codex_config  # noqa: E402

APPROVED = 'mcp_servers.agentdescent.default_tools_approval_mode="approve"'  # headless, Codex asks nobody


def setup(folder: Path, n_tasks: int, workers: int, rounds: int) -> tuple[Path, Path, dict]:
    """The skill's copy, its tasks file and the spec the scripted host writes."""
    target = folder / "support-router"
    shutil.copytree(ROOT / "examples/skills/support-router", target)
    rows = (ROOT / "examples/specs/support-router-tasks.jsonl").read_text(encoding="utf-8").splitlines()[:n_tasks]
    tasks = folder / "tasks.jsonl"
    tasks.write_text("\n".join(rows) + "\n", encoding="utf-8")
    spec = {"target": str(target), "tasks": {"file": str(tasks), "prompt": "request", "gold": "team"},
            "scorer": "exact", "agent": "host", "reflector": "host", "name": "support-router",
            "prompt": "Use the support-router skill. Which team handles this request? Answer with the team's name "
                      "only.\n\n{task}", "editable": ["SKILL.md", "routing/*"], "frozen": ["hooks/*"],
            "n_workers": workers, "rounds": rounds, "target_reward": 1.0, "host_timeout": 300}
    return target, tasks, spec


def through_claude(claude: str, folder: Path, env: dict[str, str], target: Path, tasks: Path,
                   host: ScriptedHost) -> tuple[subprocess.CompletedProcess, float]:
    """`/agentdescent:evolve` in `claude -p`, the plugin from this repository."""
    env = {**env, "ANTHROPIC_API_KEY": "sk-ant-api03-offline-bench-0000", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "MCP_CONNECTION_NONBLOCKING": "false", "MCP_TIMEOUT": "90000"}  # a loaded machine starts our server slowly
    allowed = ",".join(["Agent", "Bash", *(PREFIX + tool for tool in TOOLS)])
    with LoopbackServer(host) as server:
        return timed([claude, "-p", f"/agentdescent:evolve {target} {tasks}", "--plugin-dir",
                      str(ROOT / "plugins/claude-code"), "--allowedTools", allowed, "--output-format", "stream-json",
                      "--verbose"], cwd=folder, env={**env, "ANTHROPIC_BASE_URL": server.url})


def through_codex(codex: str, folder: Path, env: dict[str, str], target: Path, tasks: Path,
                  host: ScriptedHost) -> tuple[subprocess.CompletedProcess, float]:
    """`codex exec` asked to evolve the skill, with what `agentdescent install codex` wired into a fresh CODEX_HOME."""
    env = {**env, "CODEX_HOME": str(folder / "codex"), "NO_COLOR": "1", "LOOPBACK_API_KEY": "unused"}
    with LoopbackServer(host) as server:
        (folder / "codex").mkdir()
        (folder / "codex" / "config.toml").write_text(codex_config(server.url), encoding="utf-8")
        os.environ.update({name: env[name] for name in ("CODEX_HOME", "AGENTDESCENT_HOME")})  # where install writes
        codex_wiring.install()  # what `agentdescent install codex` does
        return timed([codex, "exec", "--skip-git-repo-check", "--json", "-c", APPROVED,
                      f"Evolve {target} with AgentDescent, against the tasks in {tasks}."], cwd=folder, env=env)


def timed(command: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    began = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=1800)
    return done, time.perf_counter() - began


HOSTS = {"claude": (ClaudeHost, through_claude), "codex": (CodexHost, through_codex)}


def evolve_through(name: str, cli: str, args: argparse.Namespace, seed: int) -> dict:
    """One whole host-driven evolution through the real CLI of host `name`; its figures."""
    with tempfile.TemporaryDirectory(prefix="host-cost-") as scratch:
        folder = Path(scratch)
        target, tasks, spec = setup(folder, args.tasks, args.workers, args.rounds)
        skill_md = (ROOT / "skills/agentdescent/SKILL.md").read_text(encoding="utf-8")
        rows = [json.loads(line) for line in tasks.read_text(encoding="utf-8").splitlines() if line.strip()]
        noisy = args if (args.p, args.q, args.harm, args.vague) != (1.0, 0.0, None, None) else None
        model, through = HOSTS[name]
        host = model(spec, skill_md, seed=seed, noise=noisy, gold={row["request"]: row["team"] for row in rows})
        (folder / "home").mkdir()
        env = {"HOME": str(folder / "home"), "AGENTDESCENT_HOME": str(folder / "agentdescent"), "LANG": "C.UTF-8",
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(Path(cli).parent), "/usr/bin", "/bin"]),
               "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
        done, seconds = through(cli, folder, env, target, tasks, host)
        if host.errors or done.returncode != 0:
            sys.exit(f"the session failed (exit {done.returncode}): {host.errors[:1]} {done.stderr[-1500:]}")
        os.environ["AGENTDESCENT_HOME"] = env["AGENTDESCENT_HOME"]
        [summary] = Service().runs()
        status = Service().status(summary.id)
        run = Service().store.get(summary.id)
        if status.state != "finished":
            log = run.file("run.log").read_text(encoding="utf-8")
            sys.exit(f"the run did not finish: {status.state}, {status.message}; its log ends: {log[-2000:]}")
        result = EvolveResult.from_json(run.file("result.json").read_text(encoding="utf-8"))
        truth = routing_truth(result.state, [Task(id=row["id"], prompt=row["request"], gold=row["team"]) for row in rows])
    return {"seed": seed, "requests": dict(host.requests), "total": sum(host.requests.values()),
            "tokens": sum(host.tokens.values()), "by": dict(host.tokens), "largest": host.largest, "parts": dict(host.parts),
            "reward": status.best_reward, "initial": status.initial_reward, "calls": status.calls, "seconds": seconds,
            "waves": [len(g) for g in host.waves], "outcomes": status.outcomes,
            "largest_answer": max(host.results, default=0), "learnt": truth.learnt, "to_learn": truth.to_learn,
            "fillers": truth.fillers, "right": truth.right}


def report(one: dict) -> str:
    return (f"seed {one['seed']}: held-out {one['initial']} -> {one['reward']:.3f}, {one['calls']} calls, "
            f"{one['seconds']:.0f} s; host requests " + ", ".join(f"{w} {n}" for w, n in one["requests"].items())
            + f" (total {one['total']}); input tokens about {one['tokens']:,} ("
            + ", ".join(f"{w} {n:,}" for w, n in one["by"].items()) + f"; largest request {one['largest']:,}; "
            + ", ".join(f"{part} {one['parts'][part]:,}" for part in PARTS) + ");"
            f" answered per host_submit {one['waves']}; outcomes {one['outcomes']}; the largest host_next answer "
            f"{one['largest_answer']:,} characters; truth: {one['learnt']} of {one['to_learn']} words learnt, "
            f"{one['fillers']} fillers kept, {one['right']:.2f} of the tasks routed right")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", choices=sorted(HOSTS), default="claude", help="the host CLI that drives the run")
    parser.add_argument("--tasks", type=int, default=36)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the stand-in reflector's seeds")
    parser.add_argument("--claude", default=None, help="the claude CLI (default: .ci-hosts' pinned one, else PATH)")
    parser.add_argument("--codex", default=None, help="the codex CLI (default: .ci-hosts' pinned one, else PATH)")
    parser.add_argument("--p", type=float, default=1.0, help="the rollouts right where the files route right")
    parser.add_argument("--q", type=float, default=0.0, help="... and where they do not")
    parser.add_argument("--harm", type=float, default=None, help="the reflector's share of filler words (default 0.1)")
    parser.add_argument("--vague", type=float, default=None, help="the reflector's share of no answer (default 0.1)")
    args = parser.parse_args()
    cli = getattr(args, args.host) or shutil.which(args.host, path=str(ROOT / ".ci-hosts/node_modules/.bin")) \
        or shutil.which(args.host)
    if not cli:
        sys.exit(f"the {args.host} CLI is not installed: npm install --prefix .ci-hosts {PINNED[args.host]}")
    print(f"{args.host}: {args.tasks} tasks, {args.workers} workers, {args.rounds} rounds; the reflector's seeds "
          f"{args.seeds}")
    found = []
    for seed in args.seeds:
        found.append(evolve_through(args.host, cli, args, seed))
        print(report(found[-1]))
    median = lambda key: statistics.median(one[key] for one in found)  # noqa: E731
    print(f"median of {len(found)}: host requests {median('total'):g}, input tokens {median('tokens'):,.0f}, "
          f"held-out reward {median('reward'):.3f}, calls {median('calls'):g}; words learnt {median('learnt'):g} "
          f"of {found[0]['to_learn']}, runs keeping a filler {sum(one['fillers'] > 0 for one in found)}, routed right "
          f"{median('right'):.2f}")
    a_request = {part: statistics.median(one["parts"][part] / one["total"] for one in found) for part in PARTS}
    print("input tokens a request on average, median of the runs: " + ", ".join(f"{part} {n:,.0f}"
                                                                             for part, n in a_request.items()))
    print(f"load average over the last 1 / 5 / 15 minutes: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
