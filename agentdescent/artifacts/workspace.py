"""Rollouts of a folder artifact by a real agent, each in a throwaway workspace.

`tree_runner(agent, layout=...)` returns a `run(rendered, task)` for `evolve`. Each rollout gets a
fresh folder: the candidate tree written where the host reads it (the layout), the pristine
frozen files written over it (the overlay: no rollout ever sees a changed frozen file), the
fixtures staged, and the agent run with that folder as its working directory. The workspace is
removed afterwards (kept when the agent failed and `keep_failed` is set). At most
`max_workspaces` exist at once; rollouts past that wait for one to go.

What the agent wrote comes back with its answer: the output is an `AgentOutput`, a `str` (the
answer, which is what a reward, the reflector and the ledger see) whose `files` maps each file
the agent created or changed in the workspace (relative to it, text files up to 1 MB) to its
text. A reward that checks the agent's work reads `output.files`.

    layout         the candidate tree goes to          read by
    claude_skill   .claude/skills/<name>/              Claude Code
    claude_agents  .claude/agents/                     Claude Code (subagent definitions)
    agents_skill   .agents/skills/<name>/              Codex, DeepSeek Harness
    root           the workspace itself                any agent

Left out: which agent to run and what it costs (agents/), and scoring (the reward).
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from agentdescent.errors import AgentError, UserError
from agentdescent.governance import unsafe_key_reason
from agentdescent.types import Task

LAYOUTS = {"claude_skill": ".claude/skills/{name}", "claude_agents": ".claude/agents",
           "agents_skill": ".agents/skills/{name}", "root": ""}
MAX_OUTPUT_FILE_BYTES = 1_000_000

Agent = Callable[..., str]  # agent(prompt, *, cwd=folder) -> its final answer


class AgentOutput(str):
    """An agent's final answer, with `files`: what it created or changed in its workspace."""

    files: dict[str, str]

    def __new__(cls, answer: str, files: Mapping[str, str] | None = None) -> AgentOutput:
        output = super().__new__(cls, answer)
        output.files = dict(files or {})
        return output


def tree_runner(agent: Agent, *, layout: str, name: str | None = None, overlay: Mapping[str, str] | None = None,
                fixtures: Mapping[str, str] | None = None, keep_failed: bool = False, max_workspaces: int = 32,
                workdir: str | os.PathLike[str] | None = None,
                prompt: Callable[[Task], str] | None = None) -> TreeRunner:
    """A `run(rendered, task)` that rolls each task out with `agent` in a fresh workspace.

    `agent(prompt, cwd=...)` is called with `prompt(task)` (default: `task.prompt`); `claude_code()`,
    `codex()` and a two-argument `scripted(...)` take `cwd`. `layout` says where the candidate
    tree goes (see the module docstring); `name` is the skill's folder name for the skill layouts.
    `overlay` ({path in the tree: text}, usually `strategy.frozen_files(tree)`) is written over the
    candidate. `fixtures` ({path in the workspace: text}) and a task's `meta["files"]` (the same
    shape) are staged for every rollout and for that task. Workspaces live under `workdir`
    (default: the system's temporary folder)."""
    return TreeRunner(agent=agent, folder=_folder(layout, name), overlay=_checked(overlay, "overlay"),
                      fixtures=_checked(fixtures, "fixtures"), keep_failed=keep_failed,
                      slots=_slots(max_workspaces), workdir=workdir, prompt=prompt or (lambda task: task.prompt))


class TreeRunner:
    """See `tree_runner`."""

    def __init__(self, *, agent: Agent, folder: str, overlay: dict[str, str], fixtures: dict[str, str],
                 keep_failed: bool, slots: threading.BoundedSemaphore, workdir: str | os.PathLike[str] | None,
                 prompt: Callable[[Task], str]) -> None:
        if not _takes_cwd(agent):
            raise UserError("tree_runner needs an agent that takes cwd=, such as claude_code(), codex() or "
                            "scripted(lambda prompt, cwd: ...); got one that takes only a prompt")
        self.agent, self.folder, self.overlay, self.fixtures = agent, folder, overlay, fixtures
        self.keep_failed, self.workdir, self.prompt = keep_failed, workdir, prompt
        self._slots = slots

    def __call__(self, rendered: Mapping[str, str], task: Task) -> AgentOutput:
        if not isinstance(rendered, Mapping):
            raise UserError(f"tree_runner runs folder artifacts (FileTree); got a {type(rendered).__name__}")
        with self._slots:
            workspace = Path(tempfile.mkdtemp(prefix="agentdescent-ws-", dir=self.workdir))
            keep = False
            try:
                written = self._stage(workspace, rendered, task)
                answer = self.agent(self.prompt(task), cwd=workspace)
                return AgentOutput(answer, _changed(workspace, written))
            except UserError:
                raise  # misconfiguration: the run stops, and the workspace goes
            except Exception as exc:
                keep = self.keep_failed
                if keep:
                    raise AgentError(f"{exc} (its workspace is kept at {workspace})") from exc
                raise
            finally:
                if not keep:
                    shutil.rmtree(workspace, ignore_errors=True)

    def _stage(self, workspace: Path, rendered: Mapping[str, str], task: Task) -> dict[str, tuple[int, int]]:
        """Write the candidate, the overlay and the fixtures; return what is there: {path: (size, mtime)}."""
        prefix = f"{self.folder}/" if self.folder else ""
        files = {prefix + key: text for key, text in {**rendered, **self.overlay}.items()}
        staged = {**self.fixtures, **_task_files(task)}
        inside = [path for path in staged if prefix and path.startswith(prefix)]
        if inside:
            raise UserError(f"fixture {inside[0]!r} would overwrite the artifact's own folder {self.folder!r}; "
                            "stage fixtures outside it")
        written = {}
        for path, text in {**files, **staged}.items():
            target = workspace / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8", newline="")
            stat = target.stat()
            written[path] = (stat.st_size, stat.st_mtime_ns)
        return written


def _changed(workspace: Path, written: Mapping[str, tuple[int, int]]) -> dict[str, str]:
    """The text files under `workspace` that are new or differ from what was staged."""
    changed: dict[str, str] = {}
    for folder, _, names in os.walk(workspace):
        for name in names:
            path = Path(folder, name)
            key = path.relative_to(workspace).as_posix()
            stat = path.lstat()
            if written.get(key) == (stat.st_size, stat.st_mtime_ns) or not path.is_file() or path.is_symlink():
                continue
            if stat.st_size <= MAX_OUTPUT_FILE_BYTES:
                try:
                    changed[key] = path.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue  # binary or vanished: not a text file the reward could read
    return changed


def _folder(layout: str, name: str | None) -> str:
    if layout not in LAYOUTS:
        raise UserError(f"layout={layout!r} is not one of {', '.join(LAYOUTS)}")
    needs_name = "{name}" in LAYOUTS[layout]
    if needs_name and (not name or "/" in name or unsafe_key_reason(name)):
        raise UserError(f"layout={layout!r} needs name=, the skill's folder name (one safe path segment), "
                        f"got {name!r}")
    return LAYOUTS[layout].format(name=name)


def _checked(files: Mapping[str, str] | None, what: str) -> dict[str, str]:
    files = dict(files or {})
    for path, text in files.items():
        reason = unsafe_key_reason(path)
        if reason or not isinstance(text, str):
            raise UserError(f"{what}: {reason or f'the text of {path!r} is not a str'}")
    return files


def _task_files(task: Task) -> dict[str, str]:
    files = task.meta.get("files") or {}
    if not isinstance(files, Mapping):
        raise UserError(f"task {task.id!r}: meta['files'] must be a mapping of {{path: text}}")
    return _checked(files, f"task {task.id!r} meta['files']")


def _slots(max_workspaces: int) -> threading.BoundedSemaphore:
    if not isinstance(max_workspaces, int) or max_workspaces < 1:
        raise UserError(f"max_workspaces must be a positive integer; got {max_workspaces!r}")
    return threading.BoundedSemaphore(max_workspaces)


def _takes_cwd(agent: Agent) -> bool:
    try:
        parameters = inspect.signature(agent).parameters.values()
    except (TypeError, ValueError):
        return True  # cannot tell: let the call say
    return any(p.name == "cwd" or p.kind is p.VAR_KEYWORD for p in parameters)
