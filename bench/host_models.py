"""The scripted models bench/host_cost.py puts behind a real host CLI: each follows SKILL.md as a model would.

`ClaudeHost` speaks Claude Code's Messages API (tests/anthropic_stream.py): the main conversation
plans, starts the run and two helpers (the Agent tool) with the prompts SKILL.md gives, one doing
the rollouts and one the reflections through `host_next` / `host_submit`, then calls `show`.
`CodexHost` speaks Codex's Responses API (tests/openai_responses.py): Codex's model first opens
the SKILL.md its skill list names, plans, starts the run, then, since SKILL.md explicitly asks for
them (Codex tells its model to spawn sub-agents only then), starts the same two helpers with
`spawn_agent` (each a thread of its own, from its prompt alone) and waits for them with
`wait_agent`. Where the SKILL.md it read does not name `spawn_agent`, it does the helpers' loop
itself, rollouts and reflections together, and says that its rollouts were not blind.

Both answer a rollout as the candidate's files say (`route_by_skill`, or a sample of it under
`--p`/`--q`), a reflection as the stand-in reflector does, and read a candidate's workspace once
(one shell call) when its files did not come. Every request is counted, with its input tokens
estimated at four characters a token and split into the tool definitions, the instructions (what
the host itself tells its model: Claude Code's system prompt and system messages, Codex's
`instructions` and developer messages) and the conversation (the user's messages, the model's
calls and what came back).

Left out: the user's yes to the quote (the bench starts the run at once), `status` polling (a
host-driven run's host does the work instead), `accept`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import threading
from typing import Any

from agentdescent.runs.hostwork import CandidateWork, HostRequest, whole_prompt
from agentdescent.testing import SkillReflector, route_by_skill, sampled
from agentdescent.testing.attempts import Attempts
from tests import anthropic_stream, openai_responses
from tests.anthropic_stream import Chat, ToolUse
from tests.loopback import Request, Response, error_response
from tests.openai_responses import Call, Turn

PREFIX = "mcp__plugin_agentdescent_agentdescent__"  # Claude Code's name for our tools
NAMESPACE = "mcp__agentdescent"  # Codex's
AGENTS = "multi_agent_v1"  # the namespace of Codex's sub-agent tools (spawn_agent, wait_agent)
TOOLS = ["plan", "evolve", "status", "show", "host_next", "host_submit", "host_read", "host_release"]
COMMAND = "Evolve with AgentDescent"  # in the expanded /agentdescent:evolve: the main conversation
ROLLOUTS, REFLECTIONS = "rollout worker for run", "reflection worker for run"
DONE = {ROLLOUTS: "The rollout worker is done.", REFLECTIONS: "The reflection worker is done."}
PARTS = ("tools", "instructions", "conversation")


def helper_prompts(skill_md: str, run_id: str) -> dict[str, str]:
    """The two helpers' prompts as SKILL.md words them, with the run's id put in."""
    found = re.findall(r'\*\*(Rollouts|Reflections):\*\* "(.+?)"\n', skill_md)
    prompts = {ROLLOUTS if kind == "Rollouts" else REFLECTIONS: text.replace("RUN_ID", run_id) for kind, text in found}
    assert set(prompts) == {ROLLOUTS, REFLECTIONS}, "SKILL.md no longer gives both helpers' prompts"
    return prompts


class ScriptedHost:
    """What both hosts' models share: the counts, the answers to the run's requests, the reads."""

    conversations: tuple[str, ...] = ("main", "side")

    def __init__(self, spec: dict, skill_md: str, *, seed: int = 0, noise: argparse.Namespace | None = None,
                 gold: dict[str, str] | None = None) -> None:
        self.spec, self.skill_md, self.seed = spec, skill_md, seed
        self.noise, self.gold, self._asked = noise, gold or {}, Attempts()
        levels = {"noise": getattr(noise, "harm", None), "silence": getattr(noise, "vague", None)}
        self.reflector = SkillReflector(seed=seed, **{name: v for name, v in levels.items() if v is not None})
        self.requests: dict[str, int] = dict.fromkeys(self.conversations, 0)
        self.tokens: dict[str, int] = dict.fromkeys(self.requests, 0)
        self.parts: dict[str, int] = dict.fromkeys(PARTS, 0)  # the input tokens, by what carried them
        self.largest = 0
        self.waves: list[list[str]] = []  # the requests each host_submit answered, by kind
        self.results: list[int] = []  # the size of each host_next answer, as the model got it
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def count(self, who: str, size: int, parts: dict[str, Any]) -> None:
        """One request of conversation `who`: `size` tokens, `parts` the JSON each part of it was sent as."""
        with self._lock:
            self.requests[who] += 1
            self.tokens[who] += size
            self.largest = max(self.largest, size)
            for part, value in parts.items():
                self.parts[part] += len(json.dumps(value)) // 4

    def work(self, taken: list[dict], answered: set[str], kind: str | None = None) -> list[tuple[dict, dict]]:
        """The requests taken with host_next and not yet answered, each with its group."""
        return [(g, q) for work in taken for g in work["work"] if kind in (None, g["kind"])
                for q in g["requests"] if q["request_id"] not in answered]

    def unread(self, open_: list[tuple[dict, dict]], taken: list[dict], read: set[str]) -> list[tuple[str, dict]]:
        """The candidates to roll out whose files did not come and that were not read yet, by id."""
        sent = {g["candidate"] for work in taken for g in work["work"] if g.get("files") is not None}
        return sorted({g["candidate"]: g for g, _ in open_ if g["kind"] == "rollout" and g.get("workspace")
                       and g["candidate"] not in sent | read}.items())

    def answers(self, open_: list[tuple[dict, dict]], taken: list[dict]) -> list[dict[str, str]]:
        contexts = {g["candidate"]: g["context"] for work in taken for g in work["work"]
                    if g.get("context") is not None}  # each candidate's, sent the first time
        answers = [{"request_id": q["request_id"], "answer": self._route(g, q) if g["kind"] == "rollout" else
                    self.reflector(_whole(g, q, contexts.get(g["candidate"], "")))} for g, q in open_]
        with self._lock:
            self.waves.append([g["kind"] for g, _ in open_])
        return answers

    def rollouts(self, conversation: Any):
        return self._worker(conversation, "rollout")

    def reflections(self, conversation: Any):
        return self._worker(conversation, "proposal")

    def shown(self, conversation: Any, run_id: str):
        """The main conversation's end: `show` once both helpers are done, then its figures."""
        if not conversation.results("show"):
            return conversation.use("show", run_id=run_id)
        shown = conversation.results("show")[-1].value
        return f"Done: held-out {shown['initial_reward']} -> {shown['final_reward']}."

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


class ClaudeHost(ScriptedHost):
    """The scripted model Claude Code talks to: one script per conversation, every request counted."""

    conversations = ("main", ROLLOUTS, REFLECTIONS, "side")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: dict[str, list[str]] = {"main": [], ROLLOUTS: [], REFLECTIONS: []}  # each conversation's messages

    def __call__(self, request: Request) -> Response:
        body = request.json
        if request.method != "POST" or request.path != "/v1/messages" or not isinstance(body, dict):
            return Response(status=404, body={})
        text = json.dumps(body.get("messages"))
        opening = json.dumps((body.get("messages") or [{}])[0])  # a helper's conversation opens with its prompt
        who = next((w for w in (ROLLOUTS, REFLECTIONS) if w in opening), "main" if COMMAND in text else "side")
        said = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "system"]  # its own
        self.count(who, len(json.dumps({k: body.get(k) for k in ("system", "messages", "tools")})) // 4,
                   {"tools": body.get("tools"), "instructions": [body.get("system"), said],
                    "conversation": [m for m in body.get("messages") or [] if m not in said]})
        if who == "side" or not body.get("tools"):
            return anthropic_stream._answer(body, ["AgentDescent run"])
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
        return anthropic_stream._answer(body, reply if isinstance(reply, list) else [reply])

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
        return self.shown(chat, run_id)

    def _worker(self, chat: Chat, kind: str):
        _check(chat)
        run_id = re.search(r"for run (\S+)\.", json.dumps(chat.body["messages"])).group(1)
        taken = [r.value for r in chat.results("host_next") if r.value]
        if taken and not taken[-1]["running"]:
            return DONE[ROLLOUTS if kind == "rollout" else REFLECTIONS]
        answered = {a["request_id"] for r in chat.results("host_submit") for a in r.input["answers"]}
        open_ = self.work(taken, answered, kind)
        unread = self.unread(open_, taken, {r.input.get("description") for r in chat.results("Bash")})
        if unread:  # a candidate whose files did not come: read once
            return [ToolUse("Bash", {"command": _cat(g["workspace"]), "description": candidate}) for candidate, g in unread]
        next_ = chat.use("host_next", run_id=run_id, kind=kind, wait=30)
        if not open_:
            return next_
        return [chat.use("host_submit", run_id=run_id, answers=self.answers(open_, taken)), next_]


class CodexHost(ScriptedHost):
    """The scripted model `codex exec` talks to: one script per conversation (Codex's sub-agents are
    threads of their own, each request saying which), every request counted."""

    conversations = ("main", ROLLOUTS, REFLECTIONS, "side")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: dict[str, list[str]] = {"main": [], ROLLOUTS: [], REFLECTIONS: []}  # each conversation's input
        self._counted: set[str] = set()  # the tool calls whose answers were counted in `results`

    def __call__(self, request: Request) -> Response:
        body = request.json
        if request.method != "POST" or not request.path.endswith("/responses") or not isinstance(body, dict):
            return error_response(404, f"no route {request.method} {request.path}")
        items = [item for item in body.get("input") or [] if isinstance(item, dict)]
        developer = [item for item in items if item.get("role") == "developer"]
        who = _conversation(body, items)
        self.count(who, len(json.dumps({k: body.get(k) for k in ("instructions", "input", "tools")})) // 4,
                   {"tools": body.get("tools"), "instructions": [body.get("instructions"), developer],
                    "conversation": [item for item in items if item.get("role") != "developer"]})
        if who == "side":
            return openai_responses._answer(["AgentDescent run"])
        turn = Turn(body, NAMESPACE)
        with self._lock:
            self.seen[who].append(json.dumps(items))
            self.results += [len(r.text) for r in turn.results("host_next") if r.call_id not in self._counted]
            self._counted |= {r.call_id for r in turn.history}
        try:
            _check_turn(turn)
            reply = {"main": self.main, ROLLOUTS: self.rollouts, REFLECTIONS: self.reflections}[who](turn)
        except Exception as exc:  # noqa: BLE001 -- a script bug stops codex, and the bench reports it
            self.errors.append(exc)
            return error_response(400, f"the scripted model failed: {exc!r}")
        return openai_responses._answer(reply if isinstance(reply, list) else [reply])

    def main(self, turn: Turn):
        reads = [r for r in turn.history if r.name == "exec_command"]
        if not reads:  # Codex lists the skill; its model opens SKILL.md before following it
            return Call("exec_command", {"cmd": f"cat {_listed_skill(turn.texts())}"})
        skill_md = reads[0].text
        assert "## Safety" in skill_md, f"SKILL.md did not come whole: {skill_md[-300:]}"
        if not turn.results("plan"):
            return turn.use("plan", spec=self.spec)
        if not turn.results("evolve"):
            return turn.use("evolve", spec=self.spec)
        run_id = turn.results("evolve")[-1].value["run_id"]
        if "`spawn_agent`" not in skill_md:  # Codex tells its model to spawn only where a skill says to
            return self._alone(turn, run_id)
        spawned = [r.value["agent_id"] for r in turn.history if r.name == "spawn_agent"]
        if not spawned:  # both at once, each from its prompt alone (no fork_context)
            return [Call("spawn_agent", {"message": prompt}, AGENTS) for prompt in helper_prompts(skill_md, run_id).values()]
        finished = {agent: state for r in turn.history if r.name == "wait_agent"
                    for agent, state in r.value["status"].items()}
        failed = {agent: state for agent, state in finished.items() if "completed" not in state}
        assert not failed, f"a helper did not complete: {failed}"
        if set(spawned) - set(finished):
            return Call("wait_agent", {"targets": sorted(set(spawned) - set(finished)), "timeout_ms": 3_600_000}, AGENTS)
        return self.shown(turn, run_id)

    def _worker(self, turn: Turn, kind: str):
        run_id = re.search(r"for run (\S+)\.", _said(turn.body["input"])).group(1)
        calls = turn.results("host_next")
        taken = [r.value for r in calls if r.value]
        if taken and not taken[-1]["running"]:
            return DONE[ROLLOUTS if kind == "rollout" else REFLECTIONS]
        return self._step(turn, run_id, taken, kind=kind, wait=30, **({} if calls else {"fresh": True}))

    def _alone(self, turn: Turn, run_id: str):
        """The run's work done in this conversation, rollouts and reflections together (a host without helpers)."""
        taken = [r.value for r in turn.results("host_next")]
        if taken and not taken[-1]["running"]:
            if not turn.results("show"):
                return turn.use("show", run_id=run_id)
            shown = turn.results("show")[-1].value
            return (f"Done: held-out {shown['initial_reward']} -> {shown['final_reward']}. I did the rollouts myself, "
                    "so they were not blind: I had seen the tasks' answers.")
        return self._step(turn, run_id, taken, wait=30, **({} if taken else {"fresh": True}))

    def _step(self, turn: Turn, run_id: str, taken: list[dict], **next_arguments: Any):
        """Read the candidates whose files did not come; else answer what is open and take the next wave."""
        answered = {a["request_id"] for r in turn.results("host_submit") for a in r.arguments["answers"]}
        open_ = self.work(taken, answered, next_arguments.get("kind"))
        commands = [r.arguments.get("cmd", "") for r in turn.history if r.name == "exec_command"]
        read = {g["candidate"] for g, _ in open_ if any(_cat(g.get("workspace")) == cmd for cmd in commands)}
        unread = self.unread(open_, taken, read)
        if unread:  # a candidate whose files did not come: read once
            return [Call("exec_command", {"cmd": _cat(g["workspace"])}) for _, g in unread]
        next_ = turn.use("host_next", run_id=run_id, **next_arguments)
        if not open_:
            return next_
        return [turn.use("host_submit", run_id=run_id, answers=self.answers(open_, taken)), next_]


def _conversation(body: dict, items: list[dict]) -> str:
    """Whose request this is: the main conversation's, a helper's (a sub-agent opens with its prompt) or a side one."""
    meta = json.loads((body.get("client_metadata") or {}).get("x-codex-turn-metadata") or "{}")
    if meta.get("request_kind", "turn") != "turn":  # a compaction or the like
        return "side"
    if meta.get("thread_source") != "subagent":
        return "main"
    opening = _said(items)
    return next((w for w in (ROLLOUTS, REFLECTIONS) if w in opening), "side")


def _said(items: list[dict]) -> str:
    """The user's messages of a conversation: a helper's are its prompt (and where it works)."""
    return json.dumps([item for item in items if item.get("role") == "user"])


def _check_turn(turn: Turn) -> None:
    for result in turn.history:  # our tools answer JSON: anything else is an error Codex passed on
        if result.namespace == NAMESPACE and result.value is None:
            raise AssertionError(f"{result.name} failed: {result.text[:300]}")


def _listed_skill(texts: str) -> str:
    """The path of the agentdescent skill in Codex's list of skills (`(file: r0/agentdescent/SKILL.md)`, r0 a root)."""
    roots = dict(re.findall(r"- `(r\d+)` = `([^`]+)`", texts))
    found = re.search(r"- agentdescent: .*?\(file: (r\d+)/(\S+?)\)", texts)
    assert found and found.group(1) in roots, "Codex does not list the agentdescent skill: did install put it in?"
    return f"{roots[found.group(1)]}/{found.group(2)}"


def _cat(workspace: str | None) -> str:
    """The shell command that reads a candidate's files at once."""
    return f"find {workspace} -type f -name '*.md' | sort | xargs cat"


def _whole(group: dict, request: dict, context: str | None = None) -> str:
    """A request's prompt read as SKILL.md says: in its group's template, the candidate's text where it is said to be."""
    return whole_prompt(CandidateWork.model_validate(group), HostRequest.model_validate(request), context)


def _check(chat: Chat) -> None:
    for result in chat.history:
        if result.is_error and result.name.startswith(PREFIX):
            raise AssertionError(f"{result.name} failed: {result.text[:300]}")
