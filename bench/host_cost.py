"""What a host-driven run costs the host: model requests and input tokens, through the real Claude Code.

The pinned `claude` CLI runs `/agentdescent:evolve <skill> <tasks>` with the plugin from this
repository, against a scripted model on loopback that follows SKILL.md as a model would: plan,
evolve (a spec with `agent: host` and `reflector: host`, what is measured, whatever plan says of
the cheaper path this machine has), then two helpers (the Agent tool, both in one message: they
run at once) started with the prompts SKILL.md gives word for word, one doing the rollouts and
one the reflections through `host_next` / `host_submit`, and `show` once both are done. The
rollout helper reads each candidate's files once (one Bash call a new candidate) and answers from
them as the skill says (`route_by_skill`, the offline agent of the directory quickstart); the
reflection helper answers as the quickstart's reflector does. The skill is a copy of
`examples/skills/support-router` with the first `--tasks` of its tasks.

Printed: the model requests Claude Code made (the main conversation, each helper, side requests),
the input tokens they carried (estimated: a request's system, messages and tool definitions, at
four characters a token), the largest request, the run's held-out reward and calls, and the time.

With `--p`/`--q` the rollout helper's answers are samples (right with p where the files route
the request right, with q where not), and `--harm`/`--vague` set the reflector's shares of filler
words and of no answer. Every run is also read on ground truth, off the routing files its result
holds: the tasks' signal words listed under their own team, filler words kept, tasks routed right.

Run: python bench/host_cost.py [--tasks 36] [--workers 2] [--rounds 4] [--seeds 0 1 2]
     python bench/host_cost.py --p 0.85 --q 0.1 --harm 0.15 --vague 0.25 --seeds 0 1 2 3 4 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent.result import EvolveResult  # noqa: E402
from agentdescent.runs import Service  # noqa: E402
from agentdescent.runs.hostwork import CandidateWork, HostRequest, whole_prompt  # noqa: E402
from agentdescent.testing import SkillReflector, route_by_skill, routing_truth, sampled  # noqa: E402
from agentdescent.testing.attempts import Attempts  # noqa: E402
from agentdescent.types import Task  # noqa: E402
from tests.anthropic_stream import Chat, ToolUse, _answer  # noqa: E402
from tests.loopback import LoopbackServer, Request, Response  # noqa: E402

PREFIX = "mcp__plugin_agentdescent_agentdescent__"
TOOLS = ["plan", "evolve", "status", "show", "host_next", "host_submit", "host_read", "host_release"]
COMMAND = "Evolve with AgentDescent"  # in the expanded /agentdescent:evolve: the main conversation
ROLLOUTS, REFLECTIONS = "rollout worker for run", "reflection worker for run"
DONE = {ROLLOUTS: "The rollout worker is done.", REFLECTIONS: "The reflection worker is done."}


def helper_prompts(skill_md: str, run_id: str) -> dict[str, str]:
    """The two helpers' prompts as SKILL.md words them, with the run's id put in."""
    found = re.findall(r'\*\*(Rollouts|Reflections):\*\* "(.+?)"\n', skill_md)
    prompts = {ROLLOUTS if kind == "Rollouts" else REFLECTIONS: text.replace("RUN_ID", run_id) for kind, text in found}
    assert set(prompts) == {ROLLOUTS, REFLECTIONS}, "SKILL.md no longer gives both helpers' prompts"
    return prompts


class Host:
    """The scripted model Claude Code talks to: one script per conversation, every request counted."""

    def __init__(self, spec: dict, skill_md: str, *, seed: int = 0, noise: argparse.Namespace | None = None,
                 gold: dict[str, str] | None = None) -> None:
        self.spec, self.skill_md, self.seed = spec, skill_md, seed
        self.noise, self.gold, self._asked = noise, gold or {}, Attempts()
        levels = {"noise": getattr(noise, "harm", None), "silence": getattr(noise, "vague", None)}
        self.reflector = SkillReflector(seed=seed, **{name: v for name, v in levels.items() if v is not None})
        self.requests: dict[str, int] = {"main": 0, ROLLOUTS: 0, REFLECTIONS: 0, "side": 0}
        self.tokens: dict[str, int] = dict.fromkeys(self.requests, 0)
        self.largest = 0
        self.waves: list[list[str]] = []  # the requests each answer of host_next held, in order
        self.seen: dict[str, list[str]] = {"main": [], ROLLOUTS: [], REFLECTIONS: []}  # each conversation's messages
        self.results: list[int] = []  # the size of each host_next answer, as the model got it
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        body = request.json
        if request.method != "POST" or request.path != "/v1/messages" or not isinstance(body, dict):
            return Response(status=404, body={})
        text = json.dumps(body.get("messages"))
        opening = json.dumps((body.get("messages") or [{}])[0])  # a helper's conversation opens with its prompt
        who = next((w for w in (ROLLOUTS, REFLECTIONS) if w in opening), "main" if COMMAND in text else "side")
        size = len(json.dumps({k: body.get(k) for k in ("system", "messages", "tools")})) // 4
        with self._lock:
            self.requests[who] += 1
            self.tokens[who] += size
            self.largest = max(self.largest, size)
        if who == "side" or not body.get("tools"):
            return _answer(body, ["AgentDescent run"])
        chat = Chat(body, PREFIX)
        with self._lock:
            self.seen[who].append(text)
            self.results += [len(r.text) for r in chat.last() if r.name == PREFIX + "host_next"]
        try:
            reply = {"main": self.main, ROLLOUTS: self.rollouts, REFLECTIONS: self.reflections}[who](chat)
        except Exception as exc:  # noqa: BLE001 -- a script bug stops claude, and the bench reports it
            self.errors.append(exc)
            return Response(status=400, body={"type": "error", "error": {"type": "invalid_request_error",
                                                                          "message": repr(exc)}})
        return _answer(body, reply if isinstance(reply, list) else [reply])

    def main(self, chat: Chat):
        _check(chat)
        if not chat.results("plan"):
            return chat.use("plan", spec=self.spec)
        if not chat.results("evolve"):
            return chat.use("evolve", spec=self.spec)
        run_id = chat.results("evolve")[-1].value["run_id"]
        if not any(r.name == "Agent" for r in chat.history):
            prompts = helper_prompts(self.skill_md, run_id)
            return [ToolUse("Agent", {"description": f"AgentDescent {name}", "prompt": prompt,
                                      "subagent_type": "general-purpose", "run_in_background": False})
                    for name, prompt in prompts.items()]
        messages = json.dumps(chat.body["messages"])
        if not all(done in messages for done in DONE.values()):
            return "The helpers are doing the run's work; I wait for them."
        if not chat.results("show"):
            return chat.use("show", run_id=run_id)
        shown = chat.results("show")[-1].value
        return f"Done: held-out {shown['initial_reward']} -> {shown['final_reward']}."

    def rollouts(self, chat: Chat):
        return self._worker(chat, "rollout", self._route)

    def reflections(self, chat: Chat):
        contexts = {g["candidate"]: g["context"] for r in chat.results("host_next") if r.value
                    for g in r.value["work"] if g.get("context") is not None}  # each candidate's, sent the first time
        return self._worker(chat, "proposal", lambda group, request: self.reflector(  # the candidate where it says
            _whole(group, request, contexts.get(group["candidate"], ""))))

    def _worker(self, chat: Chat, kind: str, answer):
        _check(chat)
        run_id = re.search(r"for run (\S+)\.", json.dumps(chat.body["messages"])).group(1)
        taken = [r.value for r in chat.results("host_next") if r.value]
        if taken and not taken[-1]["running"]:
            return DONE[ROLLOUTS if kind == "rollout" else REFLECTIONS]
        answered = {a["request_id"] for r in chat.results("host_submit") for a in r.input["answers"]}
        open_ = [(g, q) for work in taken for g in work["work"] for q in g["requests"] if q["request_id"] not in answered]
        sent = {g["candidate"] for work in taken for g in work["work"] if g.get("files") is not None}
        read = sent | {r.input.get("description") for r in chat.results("Bash")}
        unread = sorted({g["candidate"]: g for g, _ in open_ if g.get("workspace") and g["candidate"] not in read}.items())
        if kind == "rollout" and unread:  # a candidate whose files did not come: read once
            return [ToolUse("Bash", {"command": f"find {g['workspace']} -type f -name '*.md' | sort | xargs cat",
                                     "description": candidate}) for candidate, g in unread]
        next_ = chat.use("host_next", run_id=run_id, kind=kind, wait=30)
        if not open_:
            return next_
        answers = [{"request_id": q["request_id"], "answer": answer(g, q)} for g, q in open_]
        self.waves.append([kind] * len(answers))
        return [chat.use("host_submit", run_id=run_id, answers=answers), next_]

    def _route(self, group: dict, request: dict) -> str:
        """As the skill's files say; with `--p`/`--q`, a sample: right with p where they route the
        request right and q where not, from a stream seeded by the seed, the request, the
        candidate and how many times it was asked before."""
        answer = route_by_skill(_whole(group, request), group["workspace"])
        gold = self.gold.get(request["prompt"])
        if self.noise is None or gold is None:
            return answer
        key = hashlib.sha256(f"{request['prompt']}\0{group['candidate']}".encode("utf-8")).hexdigest()
        roll = random.Random(f"{self.seed}|{key}|{self._asked.next(key)}").random()
        return sampled(answer, gold, roll, p=self.noise.p, q=self.noise.q)


def _whole(group: dict, request: dict, context: str | None = None) -> str:
    """A request's prompt read as SKILL.md says: in its group's template, the candidate's text where it is said to be."""
    return whole_prompt(CandidateWork.model_validate(group), HostRequest.model_validate(request), context)


def _check(chat: Chat) -> None:
    for result in chat.history:
        if result.is_error and result.name.startswith(PREFIX):
            raise AssertionError(f"{result.name} failed: {result.text[:300]}")


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


def evolve_through_claude(claude: str, args: argparse.Namespace, seed: int) -> dict:
    """One whole host-driven evolution through the real CLI; its figures."""
    with tempfile.TemporaryDirectory(prefix="host-cost-") as scratch:
        folder = Path(scratch)
        target, tasks, spec = setup(folder, args.tasks, args.workers, args.rounds)
        skill_md = (ROOT / "skills/agentdescent/SKILL.md").read_text(encoding="utf-8")
        rows = [json.loads(line) for line in tasks.read_text(encoding="utf-8").splitlines() if line.strip()]
        noisy = args if (args.p, args.q, args.harm, args.vague) != (1.0, 0.0, None, None) else None
        host = Host(spec, skill_md, seed=seed, noise=noisy, gold={row["request"]: row["team"] for row in rows})
        home = folder / "home"
        home.mkdir()
        env = {"HOME": str(home), "AGENTDESCENT_HOME": str(folder / "agentdescent"), "LANG": "C.UTF-8",
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(Path(claude).parent), "/usr/bin", "/bin"]),
               "ANTHROPIC_API_KEY": "sk-ant-api03-offline-bench-0000", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "MCP_CONNECTION_NONBLOCKING": "false", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
        allowed = ",".join(["Agent", "Bash", *(PREFIX + tool for tool in TOOLS)])
        with LoopbackServer(host) as server:
            began = time.perf_counter()
            done = subprocess.run([claude, "-p", f"/agentdescent:evolve {target} {tasks}", "--plugin-dir",
                                   str(ROOT / "plugins/claude-code"), "--allowedTools", allowed,
                                   "--output-format", "stream-json", "--verbose"], cwd=folder,
                                  env={**env, "ANTHROPIC_BASE_URL": server.url}, capture_output=True, text=True,
                                  timeout=1800)
            seconds = time.perf_counter() - began
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
            "tokens": sum(host.tokens.values()), "largest": host.largest, "reward": status.best_reward,
            "initial": status.initial_reward, "calls": status.calls, "seconds": seconds,
            "waves": [len(g) for g in host.waves], "outcomes": status.outcomes,
            "largest_answer": max(host.results, default=0), "learnt": truth.learnt, "to_learn": truth.to_learn,
            "fillers": truth.fillers, "right": truth.right}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=36)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the stand-in reflector's seeds")
    parser.add_argument("--claude", default=None, help="the claude CLI (default: .ci-hosts' pinned one, else PATH)")
    parser.add_argument("--p", type=float, default=1.0, help="the rollout helper right where the files route right")
    parser.add_argument("--q", type=float, default=0.0, help="... and where they do not")
    parser.add_argument("--harm", type=float, default=None, help="the reflector's share of filler words (default 0.1)")
    parser.add_argument("--vague", type=float, default=None, help="the reflector's share of no answer (default 0.1)")
    args = parser.parse_args()
    claude = args.claude or shutil.which("claude", path=str(ROOT / ".ci-hosts/node_modules/.bin")) or shutil.which("claude")
    if not claude:
        sys.exit("the claude CLI is not installed: npm install --prefix .ci-hosts @anthropic-ai/claude-code@2.1.332")
    print(f"{args.tasks} tasks, {args.workers} workers, {args.rounds} rounds; the reflector's seeds {args.seeds}")
    found = []
    for seed in args.seeds:
        one = evolve_through_claude(claude, args, seed)
        found.append(one)
        print(f"seed {seed}: held-out {one['initial']} -> {one['reward']:.3f}, {one['calls']} calls, "
              f"{one['seconds']:.0f} s; host requests " + ", ".join(f"{w} {n}" for w, n in one["requests"].items())
              + f" (total {one['total']}); input tokens about {one['tokens']:,} (largest request {one['largest']:,}); "
              f"answered per host_submit {one['waves']}; outcomes {one['outcomes']}; the largest host_next answer "
              f"{one['largest_answer']:,} characters; truth: {one['learnt']} of {one['to_learn']} words learnt, "
              f"{one['fillers']} fillers kept, {one['right']:.2f} of the tasks routed right")
    median = lambda key: statistics.median(one[key] for one in found)  # noqa: E731
    print(f"median of {len(found)}: host requests {median('total'):g}, input tokens {median('tokens'):,.0f}, "
          f"held-out reward {median('reward'):.3f}, calls {median('calls'):g}; words learnt {median('learnt'):g} "
          f"of {found[0]['to_learn']}, runs keeping a filler {sum(one['fillers'] > 0 for one in found)}, routed right "
          f"{median('right'):.2f}")
    print(f"load average over the last 1 / 5 / 15 minutes: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
