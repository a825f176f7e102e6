"""Rollouts of a folder artifact by a real agent, each in a throwaway workspace.

`tree_runner(agent, layout=...)` returns a `run(rendered, task)` for `evolve`. Each rollout gets a
workspace of its own: the candidate tree written where the host reads it (the layout), the
pristine frozen files written over it (the overlay: no rollout ever sees a changed frozen file),
the fixtures staged, and the agent run with that folder as its working directory. A workspace
the agent left exactly as staged (the same files, sizes, times, inodes and modes, no new folder;
what a CLI keeps there on its own account, `traces.HOST_FOLDERS`, is not looked at) is kept for
the next rollout of the same candidate, less the task's own fixtures and those folders, and checked so
again when it is taken (something the agent left running may have changed it); any other is removed
(kept when the agent failed and `keep_failed` is set). Staging a candidate once rather than
once a rollout is what keeps a wave of hundreds of rollouts from being bound by file-system
work. At most `max_workspaces` are in use at once, rollouts past that wait; at most as many
again stay idle, and `close()` (or the runner's end, or the end of the `evolve` it was given to)
removes them.

What the agent wrote comes back with its answer: the output is an `AgentOutput`, a `str` (the
answer, which is what a reward, the reflector and the ledger see) whose `files` maps each file
the agent created or changed in the workspace (relative to it, text files up to 1 MB, at most
`MAX_OUTPUT_FILES` of them and `MAX_OUTPUT_BYTES` in all; each read through its folders without
following a link) to its text. A reward that checks the agent's work reads `output.files`.

    layout         the candidate tree goes to          read by
    claude_skill   .claude/skills/<name>/              Claude Code
    claude_agents  .claude/agents/                     Claude Code (subagent definitions)
    agents_skill   .agents/skills/<name>/              Codex, DeepSeek Harness
    plugin         plugin/                             claude --plugin-dir plugin (a host plugin)
    root           the workspace itself                any agent (Claude Code takes its .claude/settings*.json
                                                       and .mcp.json as the project's: `runs.rootconfig`)

Left out: which agent to run and what it costs (agents/), and scoring (the reward).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentdescent import atomic
from agentdescent.agents.base import accepts_keyword
from agentdescent.agents.traces import HOST_FOLDERS
from agentdescent.artifacts.state import state_hash
from agentdescent.artifacts.textform import BOM
from agentdescent.errors import AgentError, UserError
from agentdescent.governance import unsafe_key_reason
from agentdescent.quoting import quoted
from agentdescent.removal import remove_tree
from agentdescent.returned import as_text
from agentdescent.types import Task
from agentdescent.walking import walk

LAYOUTS = {"claude_skill": ".claude/skills/{name}", "claude_agents": ".claude/agents",
           "agents_skill": ".agents/skills/{name}", "plugin": "plugin", "root": ""}
MAX_OUTPUT_FILE_BYTES = 1_000_000
MAX_OUTPUT_FILES = 1_000  # files an agent made or changed that come back with its answer
MAX_OUTPUT_BYTES = 20_000_000  # and their bytes in all
# A skill's name as hosts take it (lowercase letters, digits, hyphens; at most 64): one safe path segment.
_SKILL_NAME = re.compile(r"name:\s*[\"']?([a-z0-9][a-z0-9-]{0,63})[\"']?")

Agent = Callable[..., str]  # agent(prompt, *, cwd=folder) -> its final answer


class AgentOutput(str):
    """An agent's final answer, with `files`: what it created or changed in its workspace."""

    files: dict[str, str]

    def __new__(cls, answer: str, files: Mapping[str, str] | None = None) -> AgentOutput:
        output = super().__new__(cls, answer)
        output.files = dict(files or {})
        return output


def tree_runner(agent: Agent, *, layout: str, name: str | None = None, overlay: Mapping[str, str] | None = None,
                assets: Mapping[str, bytes] | None = None, executable: Iterable[str] = (),
                fixtures: Mapping[str, str] | None = None, keep_failed: bool = False, max_workspaces: int = 32,
                workdir: str | os.PathLike[str] | None = None,
                prompt: Callable[[Task], str] | None = None) -> TreeRunner:
    """A `run(rendered, task)` that rolls each task out with `agent` in a fresh workspace.

    `agent(prompt, cwd=...)` is called with `prompt(task)` (default: `task.prompt`); `claude_code()`,
    `codex()` and a two-argument `scripted(...)` take `cwd`. `layout` says where the candidate
    tree goes (see the module docstring); `name` is the skill's folder name for the skill layouts.
    `overlay` ({path in the tree: text}, usually `strategy.frozen_files(tree)`) is written over the
    candidate. `assets` ({path in the tree: bytes}: the folder's files that are not text, which
    `load_tree(binary=...)` collects) go beside it as they are. `executable` names the paths in
    the tree (candidate, overlay or assets) written with execute bits, as they are in the target
    (`load_tree(executable=...)` collects them); a file a diff creates is not. `fixtures` ({path in the
    workspace: text}) and a task's `meta["files"]` (the same shape) are staged for every rollout
    and for that task. Workspaces live under `workdir` (default: the system's temporary folder)."""
    folder = _folder(layout, name)
    if isinstance(executable, str):
        raise UserError(f"executable must be a list or set of paths in the tree, not the string {executable!r}")
    return TreeRunner(agent=agent, folder=folder, overlay=_checked(overlay, "overlay"),
                      executable=frozenset(f"{folder}/{k}" if folder else k for k in executable),
                      assets={f"{folder}/{k}" if folder else k: v for k, v in _checked(assets, "assets", bytes).items()},
                      fixtures=_checked(fixtures, "fixtures"), keep_failed=keep_failed,
                      max_workspaces=_checked_count(max_workspaces), workdir=workdir, prompt=prompt or _task_prompt)


Stats = dict[str, tuple[int, ...]]  # relative path -> (size, mtime, ctime in ns, inode, mode): any change moves one


@dataclass(kw_only=True)
class _Workspace:
    path: Path
    files: Stats  # what it holds when clean: the candidate, the overlay, the assets and the common fixtures
    folders: set[str]  # every folder those files need


class TreeRunner:
    """See `tree_runner`."""

    def __init__(self, *, agent: Agent, folder: str, overlay: dict[str, str], fixtures: dict[str, str],
                 keep_failed: bool, max_workspaces: int, workdir: str | os.PathLike[str] | None,
                 prompt: Callable[[Task], str], assets: dict[str, bytes] | None = None,
                 executable: frozenset[str] = frozenset()) -> None:
        if not accepts_keyword(agent, "cwd", unknown=True):  # cannot tell: let the call say
            raise UserError("tree_runner needs an agent that takes cwd=, such as claude_code(), codex() or "
                            "scripted(lambda prompt, cwd: ...); got one that takes only a prompt")
        self.agent, self.folder, self.overlay, self.fixtures = agent, folder, overlay, fixtures
        self.assets = dict(assets or {})  # by path in the workspace
        self.executable = executable  # by path in the workspace
        self.keep_failed, self.workdir, self.prompt = keep_failed, workdir, prompt
        self.max_workspaces = max_workspaces
        self._start()

    def _start(self) -> None:
        """Its bound on workspaces in use, and its pool of idle ones (as many again at most)."""
        self._slots = threading.BoundedSemaphore(self.max_workspaces)
        self._idle = _Idle(self.max_workspaces)
        weakref.finalize(self, self._idle.clear)  # idle workspaces go with the runner, or at exit

    def __getstate__(self) -> dict[str, Any]:
        """A copy sent to a worker process or a Ray actor (the process and Ray executors) has a
        bound and a pool of its own: its idle workspaces go with the copy, as this one's go with it."""
        return {key: value for key, value in self.__dict__.items() if key not in ("_slots", "_idle")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start()

    def __call__(self, rendered: Mapping[str, str], task: Task) -> AgentOutput:
        if not isinstance(rendered, Mapping):
            raise UserError(f"tree_runner runs folder artifacts (FileTree); got a {type(rendered).__name__}")
        base = self._base(rendered)
        task_files = self._task_files(task)
        key = state_hash(base)
        with self._slots:
            workspace = self._idle.take(key)
            if workspace is not None and _scan(workspace.path) != (workspace.files, workspace.folders):
                _remove(workspace.path)  # changed while it waited (by what an agent left running): not clean
                workspace = None
            workspace = workspace or _stage(
                Path(tempfile.mkdtemp(prefix="agentdescent-ws-", dir=self.workdir)), {**self.assets, **base},
                self.executable)
            outcome = "remove"
            try:
                staged = {**workspace.files, **_write(workspace.path, task_files)}
                answer = as_text(self.agent(self.prompt(task), cwd=workspace.path), "tree_runner's agent",
                                 f" for task {quoted(task.id, 80)}")
                files, folders = _scan(workspace.path)
                if files == staged and folders <= workspace.folders | _folders_of(task_files):
                    outcome = "reuse"
                return AgentOutput(answer, _changed(workspace.path, files, staged))
            except UserError:
                raise  # misconfiguration: the run stops, and the workspace goes
            except Exception as exc:
                if self.keep_failed:
                    outcome = "keep"
                    raise AgentError(f"{exc} (its workspace is kept at {workspace.path})") from exc
                raise
            finally:
                if outcome == "reuse":
                    _unstage(workspace, task_files)
                    self._idle.put(key, workspace)
                elif outcome == "remove":
                    _remove(workspace.path)

    def close(self) -> None:
        """Remove the idle workspaces now (the runner stays usable)."""
        self._idle.clear()

    def _base(self, rendered: Mapping[str, str]) -> dict[str, str]:
        """The candidate, the overlay over it, and the common fixtures, by path in the workspace."""
        prefix = f"{self.folder}/" if self.folder else ""
        files = {prefix + key: text for key, text in {**rendered, **self.overlay}.items()}
        return {**files, **self.fixtures}

    def _task_files(self, task: Task) -> dict[str, str]:
        files = _task_files(task)
        prefix = f"{self.folder}/" if self.folder else ""
        inside = [path for path in {**self.fixtures, **files} if prefix and path.startswith(prefix)]
        if inside:
            raise UserError(f"fixture {inside[0]!r} would overwrite the artifact's own folder {self.folder!r}; "
                            "stage fixtures outside it")
        return files


class _Idle:
    """Clean workspaces by candidate, waiting for the next rollout of it; the oldest go past `limit`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._by_key: dict[str, list[_Workspace]] = {}
        self._order: list[tuple[str, _Workspace]] = []
        self._lock = threading.Lock()

    def take(self, key: str) -> _Workspace | None:
        with self._lock:
            waiting = self._by_key.get(key)
            if not waiting:
                return None
            workspace = waiting.pop()
            self._order.remove((key, workspace))
            return workspace

    def put(self, key: str, workspace: _Workspace) -> None:
        with self._lock:
            self._by_key.setdefault(key, []).append(workspace)
            self._order.append((key, workspace))
            evicted = self._order[: max(0, len(self._order) - self._limit)]
            del self._order[: len(evicted)]
            for old_key, old in evicted:
                self._by_key[old_key].remove(old)
        for _, old in evicted:
            _remove(old.path)

    def clear(self) -> None:
        with self._lock:
            gone = [workspace for _, workspace in self._order]
            self._by_key.clear()
            self._order.clear()
        for workspace in gone:
            _remove(workspace.path)


def _stage(path: Path, files: Mapping[str, str | bytes], executable: frozenset[str] = frozenset()) -> _Workspace:
    return _Workspace(path=path, files=_write(path, files, executable), folders=_folders_of(files))


def _write(root: Path, files: Mapping[str, str | bytes], executable: frozenset[str] = frozenset()) -> Stats:
    """Write `files` (texts, or bytes as they are) under `root`, those in `executable` with execute
    bits where they have read bits; return what is there now: {path: (size, mtime, ...)}."""
    written = {}
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            target.write_bytes(text)
        else:
            target.write_text(text, encoding="utf-8", newline="")
        if path in executable:
            mode = stat.S_IMODE(os.lstat(target).st_mode)
            os.chmod(target, mode | (mode & 0o444) >> 2)
        written[path] = _stats(os.lstat(target))
    return written


def _stats(info: os.stat_result) -> tuple[int, ...]:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode


def _remove(path: Path) -> None:
    """Remove a workspace, a folder the agent made unwritable or unreadable too."""
    remove_tree(path)


def _unstage(workspace: _Workspace, task_files: Mapping[str, str]) -> None:
    """Take a task's own fixtures (and the folders only they needed) out of a clean workspace, and
    what a CLI kept there on its own account (its temp files, its home: no rollout sees another's)."""
    for name in HOST_FOLDERS:
        if (workspace.path / name).is_dir() and name not in workspace.folders:
            _remove(workspace.path / name)
    for path in task_files:
        if path not in workspace.files:
            (workspace.path / path).unlink(missing_ok=True)
    for folder in sorted(_folders_of(task_files) - workspace.folders, key=len, reverse=True):
        try:
            (workspace.path / folder).rmdir()
        except OSError:
            pass


def _folders_of(files: Mapping[str, object]) -> set[str]:
    return {"/".join(parts[:i]) for parts in (p.split("/") for p in files) for i in range(1, len(parts))}


def _scan(root: Path) -> tuple[Stats, set[str]]:
    """Every file under `root` with its `_stats`, and every folder, by relative posix path, but
    those in a CLI's own folders (`HOST_FOLDERS`); one gone while it is walked is left out."""
    files: Stats = {}
    folders: set[str] = set()
    for folder, subfolders, names in walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        if not prefix:  # what a CLI keeps there on its own account is neither the agent's work nor a change
            subfolders[:] = [name for name in subfolders if name not in HOST_FOLDERS]
        folders.update(prefix + name for name in subfolders)
        for name in names:
            with contextlib.suppress(OSError):
                files[prefix + name] = _stats(os.lstat(os.path.join(folder, name)))
    return files, folders


def _changed(root: Path, files: Stats, staged: Stats) -> dict[str, str]:
    """The text files under `root` that are new or differ from what was staged, within the caps;
    each opened through its folders without following a link (a folder swapped for one while this
    reads is left out, never read through)."""
    changed: dict[str, str] = {}
    left = MAX_OUTPUT_BYTES
    for key, seen in sorted(files.items()):
        if staged.get(key) == seen or seen[0] > min(MAX_OUTPUT_FILE_BYTES, left) or not stat.S_ISREG(seen[4]):
            continue
        if len(changed) >= MAX_OUTPUT_FILES:
            break
        text = _read_inside(root, key)
        if text is not None:
            changed[key] = text
            left -= seen[0]
    return changed


def _read_inside(root: Path, key: str) -> str | None:
    """The file's text, or None: gone, binary (a NUL, as a tree reads it) or reached through a link."""
    try:
        with os.fdopen(atomic.open_in(root, key, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(MAX_OUTPUT_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_OUTPUT_FILE_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def skill_name(skill_md: str | None, default: str) -> str:
    """The name a host knows a skill by: the `name:` of its SKILL.md's front matter where that is a
    valid one, else `default` (its folder's name). A host expects the skill's folder to bear it.
    skill_name("---\nname: support-router\n---\n", "my-skill") == "support-router" """
    lines = (skill_md or "").removeprefix(BOM).splitlines()
    if not lines or lines[0].strip() != "---":
        return default
    for line in lines[1:]:
        if line.strip() == "---":
            break
        found = _SKILL_NAME.fullmatch(line.strip())
        if found:
            return found.group(1)
    return default


def _folder(layout: str, name: str | None) -> str:
    if layout not in LAYOUTS:
        raise UserError(f"layout={layout!r} is not one of {', '.join(LAYOUTS)}")
    needs_name = "{name}" in LAYOUTS[layout]
    if needs_name and (not name or "/" in name or unsafe_key_reason(name)):
        raise UserError(f"layout={layout!r} needs name=, the skill's folder name (one safe path segment), "
                        f"got {name!r}")
    return LAYOUTS[layout].format(name=name)


def _checked(files: Mapping[str, Any] | None, what: str, kind: type = str) -> dict[str, Any]:
    files = dict(files or {})
    for path, text in files.items():
        reason = unsafe_key_reason(path)
        if reason or not isinstance(text, kind):
            raise UserError(f"{what}: {reason or f'the content of {path!r} is not {kind.__name__}'}")
    return files


def _task_files(task: Task) -> dict[str, str]:
    files = task.meta.get("files") or {}
    if not isinstance(files, Mapping):
        raise UserError(f"task {task.id!r}: meta['files'] must be a mapping of {{path: text}}")
    return _checked(files, f"task {task.id!r} meta['files']")


def _task_prompt(task: Task) -> str:
    return task.prompt


def _checked_count(max_workspaces: int) -> int:
    if not isinstance(max_workspaces, int) or max_workspaces < 1:
        raise UserError(f"max_workspaces must be a positive integer; got {max_workspaces!r}")
    return max_workspaces
