"""The documentation's parse-only commands, checked and not run (benchmarks that take minutes).

A parse-only block runs in bash with `python`, `agentdescent` and `pytest` replaced by functions
that write each command down (tests/docs_blocks.py); `check_recorded` then checks every command,
in one interpreter, as its program would read it:

- `python SCRIPT FLAGS` and `python -m MODULE FLAGS`: the script or module must exist and import;
  a program that reads its flags with argparse has them parsed (an unknown flag, or a value of
  the wrong type, fails as it would for the reader) and stops there; one that reads no flags
  must be given none, and is imported, not run.
- `agentdescent FLAGS`, any installed command: its entry point parses the flags, then stops.
- `pytest ARGS`: pytest reads the arguments (options and the ini file) and every path named
  exists; nothing is collected.

    python tests/docs_parse_only.py python bench/speedup.py --seeds 0 1 2    # one command, by hand

What it leaves out: what the program would go on to do.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import io
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

SEPARATOR = "\x1f"  # between the words of one recorded command (a line each)


class Parsed(SystemExit):
    """Raised from parse_args once the flags have been read: the check is done."""


@contextlib.contextmanager
def stopped_after_parsing(argv: list[str]) -> Iterator[None]:
    """argparse parses `argv` as the program's flags, then stops the program; everything put back after."""
    parse, saved_argv, saved_path = argparse.ArgumentParser.parse_args, sys.argv, list(sys.path)

    def parse_then_stop(self, args=None, namespace=None):  # noqa: ANN001, ANN202 - argparse's own signature
        parse(self, args, namespace)
        raise Parsed(0)

    argparse.ArgumentParser.parse_args = parse_then_stop
    sys.argv = argv
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = parse
        sys.argv, sys.path[:] = saved_argv, saved_path


def check_python(words: list[str]) -> str:
    module = words[:1] == ["-m"]
    target, flags = (words[1], words[2:]) if module else (words[0], words[1:])
    if module:
        spec = importlib.util.find_spec(target)
        if spec is None:
            raise AssertionError(f"no module named {target}")
        main = importlib.util.find_spec(f"{target}.__main__") if spec.submodule_search_locations else spec
        source = Path(main.origin).read_text(encoding="utf-8")
    else:
        if not Path(target).is_file():
            raise AssertionError(f"no script {target} (from {Path.cwd()})")
        source = Path(target).read_text(encoding="utf-8")
    reads_flags = "parse_args" in source
    if flags and not reads_flags:
        raise AssertionError(f"{target} reads no flags, yet the command gives it {' '.join(flags)}")
    name = "__main__" if reads_flags else "__docs_parse_only__"
    with stopped_after_parsing([target, *flags]):
        if not module:
            sys.path.insert(0, str(Path(target).resolve().parent))
        try:
            runpy.run_module(target, run_name=name, alter_sys=True) if module else runpy.run_path(target, run_name=name)
        except Parsed:
            return f"{target} accepts {' '.join(flags) or 'no flags'}"
    if reads_flags:
        raise AssertionError(f"{target} ran to its end without reading its flags")
    return f"{target} imports (it reads no flags)"


def check_command_line(name: str, flags: list[str]) -> str:
    """An installed command (`agentdescent demo --workers 2`): its entry point parses the flags."""
    found = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == name]
    if not found:
        raise AssertionError(f"no installed command named {name}")
    with stopped_after_parsing([name, *flags]):
        try:
            found[0].load()()
        except Parsed:
            return f"{name} accepts {' '.join(flags)}"
    raise AssertionError(f"{name} {' '.join(flags)} returned without reading its flags")


def check_pytest(args: list[str]) -> str:
    from _pytest.config import _prepareconfig  # reads the options and the ini file, collects nothing

    config = _prepareconfig(list(args))
    try:
        missing = [a for a in config.args if not Path(a.split("::")[0]).exists()]
    finally:
        config._ensure_unconfigure()
    if missing:
        raise AssertionError(f"pytest {' '.join(args)}: no such path {', '.join(missing)}")
    return f"pytest accepts {' '.join(args) or 'no arguments'}"


def check(words: list[str]) -> str:
    program, rest = words[0], words[1:]
    if program in ("python", "python3"):
        return check_python(rest)
    if program == "pytest":
        return check_pytest(rest)
    return check_command_line(program, rest)


def check_recorded(path: str) -> None:
    """Check every command recorded in `path` (one a line); the first that fails raises, naming it."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    if not lines:
        raise AssertionError("the block ran no python, agentdescent or pytest command to check")
    for line in lines:
        words = line.split(SEPARATOR)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as errors:
            try:
                said = check(words)
            except SystemExit as stop:  # argparse refusing a flag: its message is on stderr
                raise AssertionError(f"{' '.join(words)}: {errors.getvalue().strip() or stop}") from None
        print(f"parse-only: {' '.join(words)}: {said}")


if __name__ == "__main__":
    print(check(sys.argv[1:]))
