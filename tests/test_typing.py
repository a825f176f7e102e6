"""The package's type hints, as a user's type checker reads them: the examples, every Python block
of the documentation and tests/typed_usage.py (the public Protocols used as a user would) check
with mypy in its default mode, against the package as installed.

mypy runs in a throwaway folder holding copies of them (each block a module of its own, as
tests/docs_blocks.py runs each in a namespace of its own). The package is on its search path as
an installed one is (PYTHONPATH, not the folder checked): without `py.typed` it is not read at
all, and with `--follow-imports=silent` only the user's code is reported. An error in a block
names the line of its page.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.docs_blocks import ROOT, blocks, pages

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def python_blocks() -> dict[str, tuple[str, int, str]]:
    """{module name: (page, line of the opening fence, code)} for every Python block of the docs and the README."""
    found = {}
    for page in [*pages(), ROOT / "README.md"]:
        label = page.relative_to(ROOT).as_posix()
        stem = re.sub(r"\W", "_", label)
        for block in blocks(page):
            if block.lang == "python" and block.mode != "skip":
                found[f"block_{stem}_{block.line}"] = (label, block.line, block.code)
    return found


def test_the_package_says_it_is_typed_and_ships_the_marker():
    assert (ROOT / "agentdescent" / "py.typed").is_file()
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in settings["tool"]["setuptools"]["package-data"]["agentdescent"], "the wheel would leave it out"


def test_the_examples_and_the_docs_programs_type_check_against_the_package(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed: pip install -e '.[dev]' installs it")
    copied = tmp_path / "examples"
    copied.mkdir()
    for example in (ROOT / "examples").glob("*.py"):
        shutil.copy(example, copied / example.name)
    where = {}
    for module, (page, line, code) in python_blocks().items():
        (tmp_path / f"{module}.py").write_text(code, encoding="utf-8")
        where[f"{module}.py"] = (page, line)
    shutil.copy(ROOT / "tests" / "typed_usage.py", tmp_path / "typed_usage.py")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n", encoding="utf-8")  # the defaults, whatever a folder above holds
    paths = [str(ROOT), str(ROOT / "mcp_server"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), "examples", "typed_usage.py", *sorted(where)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    def on_the_page(found: re.Match) -> str:
        page, line = where[found["file"]]
        return f"{page}:{line + int(found['line'])}:"

    report = re.sub(r"^(?P<file>block_\w+\.py):(?P<line>\d+):", on_the_page, done.stdout + done.stderr, flags=re.MULTILINE)
    assert where and done.returncode == 0, f"mypy finds errors a user of the package would see:\n{report}"


def test_the_package_type_checks_as_its_own_code(tmp_path):
    """The package's own code, its rare paths too, under pyproject.toml's [tool.mypy] (types-PyYAML
    of the dev extra with it): a wrong attribute or an unhandled None fails here, not on a user's run."""
    pytest.importorskip("mypy", reason="mypy is not installed: pip install -e '.[dev]' installs it")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache"), "-p", "agentdescent"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mypy finds errors in the package (fix each at its cause):\n{done.stdout}{done.stderr}"
