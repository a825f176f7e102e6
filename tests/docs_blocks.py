"""The code blocks of the documentation pages, found and run as a reader would run them.

A page's fenced ```python and ```bash blocks (also ```sh, ```shell, and the `$ ` lines of
```console) run in the order the page has them, in one throwaway folder per page that holds a
copy of `examples/`, `skills/` and `plugins/`, with a throwaway HOME, `AGENTDESCENT_HOME` and TMPDIR, and
no provider key, endpoint or proxy in the environment. Python blocks run in one interpreter per
page (tests/docs_exec.py), each in a namespace of its own; bash blocks run with
`bash -euo pipefail`. Blocks in any other language (text, yaml, json, toml, mermaid) are not run.

A marker, an HTML comment on the line just before the fence (the site does not show it), says
how a block runs when it cannot run as it is:

    <!-- docs-test: with stand-ins: openai, hf -->    run, against the stand-ins named (STAND_INS)
    <!-- docs-test: parse-only (why) -->              checked, not run (tests/docs_parse_only.py)
    <!-- docs-test: skip (why) -->                    not run at all; the reason is reported

`<!-- docs-test-page: parse-only (why) -->` on a line of its own, anywhere on a page, makes
parse-only the way of every block there without a marker of its own (results.md: benchmarks
that take minutes). A parse-only bash block runs from the repository root with `python`,
`pytest` and `agentdescent` writing their commands down instead of running them, and each
command is then checked (tests/docs_parse_only.py: the script exists and accepts its flags); a
parse-only python block is compiled, not run.

    python -m tests.docs_blocks docs/quickstart-directory.md    # run one page's blocks, show what each printed
    python -m tests.docs_blocks --list                          # every block, and which run with stand-ins, parse-only or not at all
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.procutil import close_and_wait

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUNNABLE = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash", "console": "bash"}
COPIED = ("examples", "skills", "plugins")  # what a page's folder holds, as a clone would
BLOCK_TIMEOUT = 180.0
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>.*?)\s*-->\s*$")
_PAGE_MARKER = re.compile(r"^\s*<!--\s*docs-test-page:\s*(?P<what>.*?)\s*-->\s*$")
_WHY = re.compile(r"^(?P<mode>skip|parse-only)\s*\((?P<reason>.+)\)$")
_STAND_INS = re.compile(r"^with stand-ins:\s*(?P<names>[\w, -]+)$")
# what would point a client at a real provider, a proxy, a host's own config, or carry a key
_CLEARED = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DEEPSEEK_API_KEY",
            "DEEPSEEK_BASE_URL", "HF_TOKEN", "HF_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
            "https_proxy", "all_proxy", "PYTHONPATH", "CODEX_HOME", "DSH_HOME", "CLAUDE_CONFIG_DIR", "AGENTDESCENT_MODEL",
            "AGENTDESCENT_RUN", "AGENTDESCENT_DEBUG_HTTP", "FAKE_CLI_MODE", "FAKE_CLI_LOG", "RAY_ADDRESS")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


@dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced block of a page, and how its marker says to run it."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # python or bash (the runner); blocks of other languages are not collected
    code: str
    mode: str = "run"  # run, parse-only or skip
    reason: str = ""  # why a block is skipped or only parsed
    stand_ins: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """page.md:line[lang, how]: index.md:30[bash, stand-ins: claude-cli]"""
        how = {"run": f"stand-ins: {' '.join(self.stand_ins)}" if self.stand_ins else "run"}.get(self.mode, self.mode)
        return f"{self.page.relative_to(DOCS).as_posix()}:{self.line}[{self.lang}, {how}]"


@dataclass(kw_only=True)
class Ran:
    """What became of a block: passed, failed or skipped, what it printed, and how long it took."""

    block: Block
    status: str
    output: str = ""
    seconds: float = 0.0
    reason: str = ""


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of `page`, in order; a marker the convention does not know raises ValueError."""
    lines = page.read_text(encoding="utf-8").splitlines()
    default = _page_default(page, lines)
    found, i = [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == opening["fence"]), len(lines))
        indent = len(opening["indent"])
        body = [line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1:end]]
        lang = RUNNABLE.get(opening["lang"].lower())
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        if lang is not None:
            code = "\n".join(_commands(body) if opening["lang"].lower() == "console" else body) + "\n"
            how = _parse_marker(page, i, marker["what"]) if marker else default
            found.append(Block(page=page, line=i + 1, lang=lang, code=code, **how))
        elif marker:
            raise ValueError(f"{page.name}:{i}: a docs-test marker before a {opening['lang'] or 'plain'} block, "
                             "which is never run: take the marker out")
        i = end + 1
    return found


def _page_default(page: Path, lines: list[str]) -> dict:
    for number, line in enumerate(lines, 1):
        marker = _PAGE_MARKER.match(line)
        if marker:
            return _parse_marker(page, number, marker["what"])
    return {}


def _parse_marker(page: Path, line: int, what: str) -> dict:
    why, stand_ins = _WHY.match(what), _STAND_INS.match(what)
    if why:
        return {"mode": why["mode"], "reason": why["reason"].strip()}
    if stand_ins:
        names = tuple(n.strip() for n in stand_ins["names"].split(",") if n.strip())
        unknown = [n for n in names if n not in STAND_INS]
        if unknown:
            raise ValueError(f"{page.name}:{line}: no stand-in named {', '.join(unknown)}; there are {', '.join(STAND_INS)}")
        return {"stand_ins": names}
    raise ValueError(f"{page.name}:{line}: a docs-test marker says {what!r}; it must be `with stand-ins: NAME, ...`, "
                     "`parse-only (why)` or `skip (why)`")


def _commands(lines: list[str]) -> list[str]:
    """A console block's commands: its `$ ` lines (the rest is what they print)."""
    return [line[2:] for line in lines if line.startswith("$ ")]


# The stand-ins. Each is a context manager that yields the variables a block runs with (a PATH
# is a folder put first on the block's PATH), or raises Unavailable with the reason it cannot be had here.

class Unavailable(Exception):
    """A stand-in this machine cannot provide (a host CLI that is not installed): the block is skipped, with why."""


def arithmetic_model(prompt: str) -> str:
    """The openai stand-in's model: it works sums out loud unless told to give the final answer only,
    and, asked to reflect (the reflector's prompt), proposes exactly that rule."""
    if "<instructions>" in prompt:
        return "The answer buries the number in prose.\n<rule>Reply with the final answer only, no working.</rule>"
    asked = re.search(r"What is (\d+) plus (\d+)\?", prompt)
    if asked is None:
        return "I do not know."
    a, b = map(int, asked.groups())
    if "final answer only" in prompt:
        return str(a + b)
    return f"Let me work through it. {a} plus {b} makes {a + b}. So the answer is {a + b}."


def gsm8k_rows(n: int = 60) -> list[dict]:
    """Rows shaped as openai/gsm8k's (`question`, `answer` ending in `#### N`), sums the arithmetic model can do."""
    return [{"question": f"What is {i} plus {2 * i + 1}?", "answer": f"{i} + {2 * i + 1} = {3 * i + 1}\n#### {3 * i + 1}"}
            for i in range(n)]


@contextlib.contextmanager
def openai_stand_in() -> Iterator[dict[str, str]]:
    from tests.loopback import LoopbackServer, openai_chat

    with LoopbackServer(openai_chat(arithmetic_model)) as server:
        yield {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-docs-stand-in-openai",
               "AGENTDESCENT_MODEL": "stand-in-arithmetic"}


@contextlib.contextmanager
def hf_stand_in() -> Iterator[dict[str, str]]:
    from tests.loopback import LoopbackServer, Response

    rows = gsm8k_rows()

    def datasets_server(request) -> Response:  # noqa: ANN001 - tests.loopback.Request
        query = {k: v[0] for k, v in request.query.items()}
        if request.path == "/splits":
            return Response(body={"splits": [{"dataset": query["dataset"], "config": "main", "split": "test"}]})
        offset, length = int(query["offset"]), int(query["length"])
        page = [{"row_idx": i, "row": row, "truncated_cells": []} for i, row in enumerate(rows) if offset <= i < offset + length]
        return Response(body={"rows": page, "num_rows_total": len(rows)})

    with LoopbackServer(datasets_server) as server:
        yield {"HF_ENDPOINT": server.url}


@contextlib.contextmanager
def anthropic_stand_in() -> Iterator[dict[str, str]]:
    from examples.skill_dir_evolution import SkillReflector
    from tests.loopback import LoopbackServer, anthropic_messages

    with LoopbackServer(anthropic_messages(SkillReflector(0))) as server:
        yield {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-docs-stand-in"}


@contextlib.contextmanager
def claude_cli_stand_in() -> Iterator[dict[str, str]]:
    """`claude` on PATH is tests/fake_clis/claude in its `skill` mode, started without `site` (it
    needs the standard library only, and an editable install's path hook costs each start 30 ms)."""
    with tempfile.TemporaryDirectory(prefix="docs-claude-") as folder:
        wrapper = Path(folder) / "claude"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{ROOT / "tests" / "fake_clis" / "claude"}" "$@"\n',
                           encoding="utf-8")
        wrapper.chmod(0o755)
        yield {"PATH": folder, "FAKE_CLI_MODE": "skill"}


@contextlib.contextmanager
def host_clis() -> Iterator[dict[str, str]]:
    folders = [os.environ.get("AGENTDESCENT_HOST_BIN", ""), str(ROOT / ".ci-hosts" / "node_modules" / ".bin")]
    found = next((f for f in filter(None, folders) if shutil.which("claude", path=f) and shutil.which("codex", path=f)), None)
    if found is None:
        raise Unavailable("the claude and codex CLIs are not installed: .ci/run installs the pinned versions from npm "
                          "into .ci-hosts/ (was npm unreachable?), or set AGENTDESCENT_HOST_BIN")
    yield {"PATH": found}


STAND_INS: dict[str, Callable[[], contextlib.AbstractContextManager[dict[str, str]]]] = {
    "openai": openai_stand_in,      # a loopback OpenAI-compatible server; its model does sums (arithmetic_model)
    "hf": hf_stand_in,              # a loopback Hugging Face datasets-server serving gsm8k-shaped rows
    "anthropic": anthropic_stand_in,  # a loopback Anthropic Messages API answering as the support-router reflector
    "claude-cli": claude_cli_stand_in,  # tests/fake_clis first on PATH: `claude -p` that follows the skill it finds
    "host-clis": host_clis,         # the real, pinned claude and codex CLIs (tests/host_clis.py), in the throwaway HOME
}


def _path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def base_env(folder: Path) -> dict[str, str]:
    """The environment every block starts from: this venv first on PATH, throwaway homes, no keys."""
    env = {k: v for k, v in os.environ.items()
           if k not in _CLEARED and not any(word in k.upper() for word in _SECRET_WORDS)}
    home = folder / "home"
    for sub in ("tmp", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), AGENTDESCENT_HOME=str(home / ".agentdescent"), TMPDIR=str(home / "tmp"),
               AGENTDESCENT_CACHE=str(home / "cache"), PATH=_path(), PYTHONDONTWRITEBYTECODE="1",
               COLUMNS="100", NO_COLOR="1")
    return env


# A parse-only block's commands are written down, one a line, and checked after it by docs_parse_only.
_PARSE_ONLY_PRELUDE = """\
_record() {{ local IFS=$'\\x1f'; printf '%s\\n' "$*" >> "{commands}"; }}
python() {{ _record python "$@"; }}
python3() {{ _record python "$@"; }}
agentdescent() {{ _record agentdescent "$@"; }}
pytest() {{ _record pytest "$@"; }}
"""
_CHECK_RECORDED = ("import sys; sys.path.insert(0, {root!r})\n"
                   "from tests.docs_parse_only import check_recorded; check_recorded({commands!r})\n")


class Interpreter:
    """The page's python interpreter (tests/docs_exec.py), started on first use."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env, self.process = cwd, env, None

    def run(self, code: Path, out: Path, env: dict[str, str], timeout: float) -> tuple[bool, str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "docs_exec.py")], cwd=self.cwd,
                                            env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.process.stdin.write(json.dumps({"code": str(code), "out": str(out), "env": env}) + "\n")
        self.process.stdin.flush()
        answer = _read_line(self.process.stdout, timeout)
        if answer is None:
            self.process.kill()
            self.process.wait()
            self.process = None
            return False, f"no answer within {timeout:g} s: the block was stopped"
        reply = json.loads(answer)
        return reply["ok"], reply["error"]

    def close(self) -> None:
        """End the interpreter as a program ends (its atexit clean-up runs); kill it if it hangs."""
        if self.process is not None:
            close_and_wait(self.process, timeout=15)
            self.process = None


def _read_line(stream, timeout: float) -> str | None:  # noqa: ANN001 - a text pipe
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return None
    return stream.readline() or None


def run_page(page: Path, *, keep: Path | None = None) -> list[Ran]:
    """Run every block of `page` in order, in a throwaway folder (or `keep`); what became of each."""
    found = blocks(page)
    folder = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix=f"docs-{page.stem}-"))
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    env = base_env(folder)
    interpreter, checker = Interpreter(work, env), Interpreter(ROOT, env)  # checker: parse-only commands, from the root
    results = []
    try:
        with contextlib.ExitStack() as stack:
            started: dict[str, dict[str, str] | Unavailable] = {}
            for number, block in enumerate(found):
                if block.mode == "skip":
                    results.append(Ran(block=block, status="skipped", reason=block.reason))
                    continue
                extra: dict[str, str] = {}
                missing = None
                for name in block.stand_ins:
                    if name not in started:
                        try:
                            started[name] = stack.enter_context(STAND_INS[name]())
                        except Unavailable as why:
                            started[name] = why
                    if isinstance(started[name], Unavailable):
                        missing = str(started[name])
                        continue
                    for key, value in started[name].items():
                        extra[key] = f"{value}{os.pathsep}{extra.get(key, env[key])}" if key == "PATH" else value
                if missing:
                    results.append(Ran(block=block, status="skipped", reason=missing))
                    continue
                results.append(_run_block(block, number, folder, work, {**env, **extra}, interpreter, checker))
    finally:
        interpreter.close()
        checker.close()
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return results


def _run_block(block: Block, number: int, folder: Path, work: Path, env: dict[str, str], interpreter: Interpreter,
               checker: Interpreter) -> Ran:
    start = time.monotonic()
    out = folder / f"block-{number}.out"
    commands = folder / f"block-{number}.commands"
    if block.lang == "python" and block.mode == "parse-only":
        try:
            compile(block.code, block.name, "exec")
            ok, error = True, ""
        except SyntaxError as exc:
            ok, error = False, str(exc)
        out.write_text("", encoding="utf-8")
    elif block.lang == "python":
        code = folder / f"block-{number}.py"
        code.write_text(block.code, encoding="utf-8")
        changed = {k: v for k, v in env.items() if interpreter.env.get(k) != v}
        ok, error = interpreter.run(code, out, changed, BLOCK_TIMEOUT)
    else:
        script = folder / f"block-{number}.sh"
        parse_only = block.mode == "parse-only"
        commands.write_text("", encoding="utf-8")
        script.write_text((_PARSE_ONLY_PRELUDE.format(commands=commands) if parse_only else "") + block.code,
                          encoding="utf-8")
        try:
            with out.open("w", encoding="utf-8") as sink:
                done = subprocess.run(["bash", "-euo", "pipefail", str(script)], cwd=ROOT if parse_only else work,
                                      env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      timeout=BLOCK_TIMEOUT)
            ok, error = done.returncode == 0, f"exit {done.returncode}"
        except subprocess.TimeoutExpired:
            ok, error = False, f"no end within {BLOCK_TIMEOUT:g} s"
        if ok and parse_only:
            check = folder / f"block-{number}.check.py"
            check.write_text(_CHECK_RECORDED.format(root=str(ROOT), commands=str(commands)), encoding="utf-8")
            ok, error = checker.run(check, out, {}, BLOCK_TIMEOUT)
    output = out.read_text(encoding="utf-8", errors="replace")
    if not ok:
        output = f"{output}\n{error}".strip()
    return Ran(block=block, status="passed" if ok else "failed", output=output, seconds=time.monotonic() - start)


class PageRuns:
    """Every page run once, several at a time (pages share nothing: each has its own folder, home,
    stand-ins and interpreter); the tests ask block by block and wait for their page."""

    def __init__(self, chosen: list[Path], jobs: int = 6) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="docs-page")
        self._runs = {page: self._pool.submit(run_page, page) for page in chosen}

    def of(self, block: Block) -> Ran:
        return {ran.block.line: ran for ran in self._runs[block.page].result()}[block.line]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="*", help="pages to run (default: every page in docs/)")
    parser.add_argument("--keep", help="run in this folder and keep it (one page only)")
    parser.add_argument("--list", action="store_true", help="list the blocks and how each runs, running none")
    args = parser.parse_args()
    chosen = [Path(p).resolve() for p in args.pages] or pages()
    if args.list:
        for block in (b for page in chosen for b in blocks(page)):
            print(block.name + (f": {block.reason}" if block.reason else ""))
        return
    failed = 0
    for page in chosen:
        for ran in run_page(page, keep=Path(args.keep) if args.keep else None):
            print(f"=== {ran.block.name}: {ran.status} ({ran.seconds:.1f} s){' - ' + ran.reason if ran.reason else ''}")
            if ran.output:
                print(ran.output.rstrip())
            failed += ran.status == "failed"
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
