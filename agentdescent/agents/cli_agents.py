"""CLI coding agents as models: `claude_code(...)` and `codex(...)` run the real command-line
agent in a working directory (a rollout's workspace) and return its final answer.

    agent = claude_code(model="sonnet", extra_args=["--allowedTools", "Read,Edit"])
    answer = agent("fix the failing test", cwd=workspace)

Each call starts one headless process (`claude -p ... --output-format json`, or `codex exec
--json ...`) with stdin closed but for a long prompt (`cli_args.given`), in its own process group, saving no session in the user's home
where the CLI's help lists the flag for it, and parses the machine output: Claude Code's single
JSON result object, Codex's JSONL events. Calls, failures, tokens (Claude Code's summed over the
models of its `modelUsage`, every request of the call, subagents' too), seconds and (for Claude
Code) the reported cost are recorded on `agent.usage` and on every active meter. A failed call
raises `AgentError` with the CLI's own account (error subtype, failed turn), the exit code and
the stderr tail; a timeout (or the caller's `cutoff`, a rollout's `rollout_timeout`, when that
comes first, or the stop of the run the call is part of: `halts`) kills the whole process group,
and so does stdout passing `reply_byte_cap(max_reply_chars)` bytes (8 a character plus 64 KiB:
room for the JSON around the reply), which fails naming the cap; a final answer longer than
`max_reply_chars` characters fails too. A missing executable or working directory is a
`UserError`. The reply and every error text pass through `agentdescent.agents.redact.redact`
with the child's variables, before anything is cut short.

Left out on purpose: retries (a failed rollout is an outcome, not something to hide), resuming,
streaming progress, sandbox and permission flags (pass them in `extra_args`), and Windows
process-group handling (there only the CLI itself is killed on timeout).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdescent import halts
from agentdescent.agents import cli_args as args
from agentdescent.agents import traces
from agentdescent.agents.base import ModelUsage, cutoff, estimated, metered_call
from agentdescent.agents.limits import DEFAULT_MAX_REPLY_CHARS, check_max_reply_chars, raise_hint
from agentdescent.agents.redact import KEY_VARIABLES, guard_logging, redact
from agentdescent.agents.replies import reply_byte_cap
from agentdescent.errors import AgentError, UserError
from agentdescent.process import Finished, OutputTooLarge, TimedOut, run_process
from agentdescent.quoting import quoted

__all__ = ["CLIAgent", "ClaudeCode", "Codex", "claude_code", "codex"]

_TAIL_LINES, _TAIL_CHARS, _HEAD_CHARS = 20, 2000, 300
_MODELS = 64  # the models of one call's `modelUsage` read, at most


@dataclass
class _Reading:
    """What the CLI's machine output says: its reply, a failure in our words (`error`) and the
    CLI's own account of it (`said`: whole, for `_finish` to redact, then quote), its usage."""

    text: str | None = None
    error: str | None = None
    said: object = None
    counts: dict[str, float] = field(default_factory=dict)


class CLIAgent:
    """A headless CLI agent as a callable `agent(prompt, *, cwd=None) -> str`.

    Subclasses say how to build the command line (`_argv`) and how to read its output (`_read`).
    A call raises `AgentError` when the agent failed (the CLI's reason, exit code and stderr tail
    are in the message) or passed `timeout` or the reply cap (`max_reply_chars`), and `UserError`
    when it cannot start (no executable, no working directory).
    """

    program = ""          # the executable's usual name, for messages
    install_hint = ""     # how to install it
    no_reply = "no reply in the output"
    own_key = ""          # the one provider key variable it may read; the other providers' are not passed
    unsaved = ""          # the flag that keeps a call's session out of the user's home (its transcript holds all it saw)
    help_args: tuple[str, ...] = ("--help",)
    spec_field: str | None = None  # the run spec's field whose options made it (runs.wiring), which a limit's hint names

    def __init__(self, *, extra_args: Sequence[str], timeout: float, executable: str, model: str | None,
                 env: Mapping[str, str] | None, name: str, max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS) -> None:
        self.extra_args = args.strings(extra_args, "extra_args")
        self.timeout = args.positive(timeout, "timeout")
        self.max_reply_chars = check_max_reply_chars(max_reply_chars)
        self.executable = args.nonempty(executable, "executable")
        self.model = None if model is None else args.nonempty(model, "model")
        self.env = dict(args.env_overrides(env))
        self.name = name if model is None else f"{name}:{model}"
        self.usage = ModelUsage()

    def __call__(self, prompt: str, *, cwd: str | os.PathLike[str] | None = None) -> str:
        """Run the agent on `prompt` in `cwd` (default: the current directory) and return its final
        answer, any key in it redacted. Every call that starts is recorded on `usage`, failed ones
        also as failures."""
        args.check_prompt(prompt)
        guard_logging()
        workdir = args.workdir(cwd)
        others = set(KEY_VARIABLES) - {self.own_key}  # a key the agent has no use for is not its to read
        env = {**{name: value for name, value in os.environ.items() if name not in others}, **self._kept(workdir),
               **self.env}
        path = self._resolve(env)
        unsaved = [self.unsaved] if traces.lists(path, self.unsaved, self.help_args) else []
        argument, stdin = args.given(prompt)
        argv = [path, *self._argv(argument, [*unsaved, *self._kept_flags(workdir)])]
        end, halted = cutoff(), halts.came(halts.current())
        if end is not None and end.at <= time.monotonic():  # not on the bill: nothing was started
            raise AgentError(f"{self.name}: the call was not made: {end.why} had run out")
        if halted:
            raise AgentError(f"{self.name}: the call was not made: {halted} came first")
        with metered_call(self.usage) as counts:  # what a failed run reported still counts
            reply = self._finish(self._run(argv, cwd=workdir, env=env, stdin=stdin), env, counts)
            if "input_tokens" not in counts:  # the CLI reported none: estimate, as other clients do
                counts.update(estimated(prompt, reply))
        return reply

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, executable={self.executable!r}, timeout={self.timeout:g})"

    def _run(self, argv: list[str], *, cwd: str, env: Mapping[str, str], stdin: str | None = None) -> Finished:
        """Run `argv` in `cwd`, `stdin` its input (else closed); raise `AgentError` if it cannot start,
        times out or prints past the reply cap."""
        cap, end = reply_byte_cap(self.max_reply_chars), cutoff()
        left = math.inf if end is None else max(0.001, end.at - time.monotonic())
        try:
            return run_process(argv, timeout=min(self.timeout, left), stdin=stdin, cwd=cwd, env=env, max_output=cap)
        except OSError as exc:
            raise _agent_error(self.name, f"could not start {argv[0]}: {exc.strerror or exc}", "", env) from None
        except OutputTooLarge as exc:
            reason = (f"its output passed {cap:,} bytes, the cut-off for max_reply_chars={self.max_reply_chars:,} "
                      f"(8 bytes a character plus 64 KiB), so it was killed; "
                      f"{raise_hint('max_reply_chars', str(2 * self.max_reply_chars), self.spec_field)}")
            raise _agent_error(self.name, reason, exc.stderr, env) from None
        except TimedOut as exc:
            why = f"cut off at {end.why}" if end is not None and left < self.timeout else \
                raise_hint("timeout", f"{2 * self.timeout:g}", self.spec_field)
            raise _agent_error(self.name, f"{exc}; {why}", exc.stderr, env) from None

    def _finish(self, finished: Finished, env: Mapping[str, str], counts: dict[str, float]) -> str:
        """The reply of a finished process, or the `AgentError` that explains why there is none."""
        reading = self._read(finished)
        counts.update(reading.counts)
        if reading.error is not None:  # the CLI's words quoted: it may print what a model or a task wrote
            said = f": {quoted(redact(str(reading.said), env), _TAIL_CHARS)}" if reading.said else ""
            raise _agent_error(self.name, reading.error + said, finished.stderr, env, finished.returncode)
        if finished.returncode != 0:
            raise _agent_error(self.name, "failed", finished.stderr, env, finished.returncode)
        if reading.text is None:
            reason = f"{self.no_reply}; stdout began {quoted(redact(finished.stdout, env), _HEAD_CHARS)}"
            raise _agent_error(self.name, reason, finished.stderr, env)
        if len(reading.text) > self.max_reply_chars:
            reason = (f"the answer has {len(reading.text):,} characters, over max_reply_chars={self.max_reply_chars:,}; "
                      f"{raise_hint('max_reply_chars', str(2 * len(reading.text)), self.spec_field)}")
            raise _agent_error(self.name, reason, "", env)
        return redact(reading.text, env)

    def _resolve(self, env: Mapping[str, str]) -> str:
        """The executable's full path, looked up on the PATH the child will get."""
        found = shutil.which(self.executable, path=env.get("PATH", os.defpath))
        if found is None:
            raise UserError(f"{self.name}: the executable {self.executable!r} was not found on PATH; install "
                            f"it with `{self.install_hint}`, or pass executable='/full/path/to/{self.program}'")
        return os.path.abspath(found)  # a relative one means from here, not from the workspace the call runs in

    def _argv(self, prompt: str | None, flags: list[str]) -> list[str]:  # None: the prompt comes on stdin
        raise NotImplementedError

    def _kept(self, workdir: str) -> dict[str, str]:
        """The variables that keep a call in `workdir` from leaving traces where they do not belong
        (`traces`); the CLI's own say which."""
        return {}

    def _kept_flags(self, workdir: str) -> list[str]:  # those that keep it from reading what it should not
        return []

    def _read(self, finished: Finished) -> _Reading:
        raise NotImplementedError


class ClaudeCode(CLIAgent):
    """Claude Code in print mode: `claude -p PROMPT --output-format json [--model M] *extra_args`.

    Reads one JSON result object from stdout and returns its `result`. `is_error: true` or a
    subtype other than "success" is an `AgentError` naming the subtype. Input tokens count the
    cached ones too (`input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens`);
    the cost is `total_cost_usd` (or the older `cost_usd`).
    """

    program = "claude"
    install_hint = "npm install -g @anthropic-ai/claude-code"
    own_key = "ANTHROPIC_API_KEY"
    no_reply = "no JSON result object in the output"
    unsaved = "--no-session-persistence"

    def _kept(self, workdir: str) -> dict[str, str]:  # no memory of the call in the user's home
        return {"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1", **traces.shared_env(workdir)}

    def _kept_flags(self, workdir: str) -> list[str]:
        return traces.own_instructions_only(workdir)

    def _argv(self, prompt: str | None, flags: list[str]) -> list[str]:
        model = ["--model", self.model] if self.model else []
        return ["-p", *([] if prompt is None else [prompt]), "--output-format", "json", *flags, *model, *self.extra_args]

    def _read(self, finished: Finished) -> _Reading:
        result = _claude_result(finished.stdout)
        if result is None:
            return _Reading()
        counts = _claude_counts(result)
        subtype = result.get("subtype", "success")
        text = result.get("result")
        if result.get("is_error") or subtype != "success":
            what = "an error" if subtype == "success" else f"an error result ({subtype})"  # is_error with subtype success
            return _Reading(error=what, said=text, counts=counts)
        return _Reading(text=text if isinstance(text, str) else None, counts=counts)


class Codex(CLIAgent):
    """Codex non-interactively: `codex exec --json --skip-git-repo-check [--model M] *extra_args PROMPT`.

    Reads JSONL events from stdout (other lines are ignored) and returns the text of the last
    completed `agent_message` item; usage is summed over `turn.completed` events (`input_tokens`
    already includes the cached ones). A `turn.failed` event is an `AgentError`. A top-level
    `error` event is one only when no reply follows or the exit code is non-zero, because Codex
    also reports stream retries ("Reconnecting... 1/5") as `error` events.
    """

    program = "codex"
    install_hint = "npm install -g @openai/codex"
    own_key = "OPENAI_API_KEY"
    no_reply = "no agent_message in the output"
    unsaved = "--ephemeral"
    help_args = ("exec", "--help")

    def _argv(self, prompt: str | None, flags: list[str]) -> list[str]:
        model = ["--model", self.model] if self.model else []
        return ["exec", "--json", "--skip-git-repo-check", *flags, *model, *self.extra_args, "-" if prompt is None else prompt]

    def _read(self, finished: Finished) -> _Reading:
        reading, failed, last_error = _Reading(), None, None
        for event in _json_objects(finished.stdout):
            kind, item = event.get("type"), event.get("item")
            if kind == "item.completed" and isinstance(item, dict) and item.get("type") in _MESSAGE_ITEMS:
                if isinstance(item.get("text"), str):
                    reading.text = item["text"]
            elif kind == "turn.completed":
                _add_codex_usage(reading.counts, event.get("usage"))
            elif kind == "turn.failed":
                failed = _message(event.get("error"))
            elif kind == "error":
                last_error = _message(event)
        if failed is not None:
            reading.error, reading.said = "turn failed", failed
        elif last_error is not None and (reading.text is None or finished.returncode != 0):
            reading.error, reading.said = "error", last_error
        return reading


_MESSAGE_ITEMS = ("agent_message", "assistant_message")  # the second is what early `codex exec --json` called it


def claude_code(*, extra_args: Sequence[str] = (), timeout: float = 600, executable: str = "claude",
                model: str | None = None, env: Mapping[str, str] | None = None,
                max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS) -> ClaudeCode:
    """Claude Code as a model that works in a directory: `agent(prompt, cwd=workspace) -> final text`.

    `extra_args` are appended to the command line (e.g. `["--allowedTools", "Read,Edit",
    "--max-turns", "20"]`); `env` is laid over `os.environ` (read at each call) for the child.
    The process is killed, with everything it started, after `timeout` seconds, or once its
    stdout passes 8 bytes for each of `max_reply_chars` (default 1,000,000) plus 64 KiB.
    """
    return ClaudeCode(extra_args=extra_args, timeout=timeout, executable=executable, model=model, env=env,
                      name="claude_code", max_reply_chars=max_reply_chars)


def codex(*, extra_args: Sequence[str] = (), timeout: float = 600, executable: str = "codex",
          model: str | None = None, env: Mapping[str, str] | None = None,
          max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS) -> Codex:
    """OpenAI Codex (`codex exec`) as a model that works in a directory; the knobs are those of
    `claude_code` (e.g. `extra_args=["--sandbox", "workspace-write"]`). Its stdout carries every
    event of the session, so a long one may need a larger `max_reply_chars`."""
    return Codex(extra_args=extra_args, timeout=timeout, executable=executable, model=model, env=env,
                 name="codex", max_reply_chars=max_reply_chars)


# --- failures ---------------------------------------------------------------------------------


def _agent_error(label: str, reason: str, stderr: str, env: Mapping[str, str], returncode: int = 0) -> AgentError:
    """`label: reason (exit code N); stderr tail: ...`, every key (also those only in `env`, the
    child's variables) redacted before the reason (2,000 characters) and the tail are cut."""
    message = f"{label}: {redact(reason, env)[:_TAIL_CHARS]}"
    if returncode > 0:
        message += f" (exit code {returncode})"
    elif returncode < 0:
        message += f" (killed by signal {-returncode})"
    tail = _tail(redact(stderr, env))
    if tail:
        message += f"; stderr tail: {quoted(tail, _TAIL_CHARS)}"
    return AgentError(redact(message, env))


def _tail(text: str) -> str:
    """The last lines of `text` (at most 20 lines and 2,000 characters), stripped."""
    lines = text.strip().splitlines()[-_TAIL_LINES:]
    return "\n".join(lines)[-_TAIL_CHARS:]


# --- reading the output -----------------------------------------------------------------------


def _claude_result(stdout: str) -> dict[str, Any] | None:
    """The result object: stdout as one JSON object, or else its last line that is a result object."""
    try:
        whole = json.loads(stdout)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return whole
    results = [obj for obj in _json_objects(stdout) if obj.get("type") == "result"]
    return results[-1] if results else None


def _claude_counts(result: Mapping[str, Any]) -> dict[str, float]:
    """Tokens (cached ones included) and cost. `modelUsage` counts every request of the call, by
    model; `usage` may hold only the last turn (a subagent's turns are not in it), so it is read
    only where `modelUsage` holds no model's counts."""
    counts: dict[str, float] = {}
    by_model = result.get("modelUsage")
    models = [m for m in itertools.islice(by_model.values(), _MODELS) if isinstance(m, dict)] if isinstance(by_model, dict) else []
    usage = result.get("usage")
    if models:
        counts["input_tokens"] = sum(_count(m.get(key)) for m in models for key in
                                     ("inputTokens", "cacheCreationInputTokens", "cacheReadInputTokens"))
        counts["output_tokens"] = sum(_count(m.get("outputTokens")) for m in models)
    elif isinstance(usage, dict):
        counts["input_tokens"] = sum(_count(usage.get(key)) for key in
                                     ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        counts["output_tokens"] = _count(usage.get("output_tokens"))
    cost = result.get("total_cost_usd", result.get("cost_usd"))
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        counts["cost_usd"] = float(cost)
    return counts


def _add_codex_usage(counts: dict[str, float], usage: Any) -> None:
    if isinstance(usage, dict):
        counts["input_tokens"] = counts.get("input_tokens", 0) + _count(usage.get("input_tokens"))
        counts["output_tokens"] = counts.get("output_tokens", 0) + _count(usage.get("output_tokens"))


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """The lines of `text` that are JSON objects, parsed; other lines are skipped."""
    for line in text.splitlines():
        try:
            obj = json.loads(line) if line.lstrip().startswith("{") else None
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _message(obj: Any) -> str:
    if isinstance(obj, dict) and isinstance(obj.get("message"), str):
        return obj["message"]
    return json.dumps(obj)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
