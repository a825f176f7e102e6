"""Bounded reads of named files (`agentdescent.reading`), and the specs, tasks files and text
targets read through them: a device, a FIFO, a kernel file or a huge file is refused at once,
through the CLI and the MCP server as well as in process."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import mcp
import pytest

from agentdescent import reading
from agentdescent.dataloader import jsonl_rows
from agentdescent.errors import UserError
from agentdescent.runs import build, read_spec
from agentdescent.runs.spec import SpecError
from tests import keyword_domain as domain
from tests.mcp_support import REPO, fails, stdio_server

MEMORY_CAP = 2_000_000_000  # bytes of address space the CLI under test may take


def test_a_regular_file_is_read_exactly_and_anything_else_is_refused(tmp_path):
    text = tmp_path / "crlf.md"
    text.write_bytes(b"one\r\ntwo\rthree\n")
    assert reading.read_text(text, what="text target", limit=100) == "one\r\ntwo\rthree\n"
    with pytest.raises(UserError, match=r"holds 15 bytes, over the 10 bytes a text target may hold"):
        reading.read_text(text, what="text target", limit=10)
    (tmp_path / "nul.md").write_bytes(b"a\0b")
    with pytest.raises(UserError, match="binary"):
        reading.read_text(tmp_path / "nul.md", what="text target", limit=100)
    (tmp_path / "latin.md").write_bytes(b"caf\xe9")
    with pytest.raises(UserError, match="not valid UTF-8"):
        reading.read_text(tmp_path / "latin.md", what="text target", limit=100)
    with pytest.raises(UserError, match="is a folder, not a regular file"):
        reading.read_bytes(tmp_path, what="tasks file", limit=100)
    with pytest.raises(UserError, match="does not exist"):
        reading.read_bytes(tmp_path / "missing", what="tasks file", limit=100)
    (tmp_path / "link.md").symlink_to(text)
    assert reading.read_bytes(tmp_path / "link.md", what="run spec", limit=100) == text.read_bytes()
    with pytest.raises(UserError, match="is a symlink"):
        reading.read_bytes(tmp_path / "link.md", what="text target", limit=100, follow_symlinks=False)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no /proc here")
def test_system_files_are_refused_by_real_path(tmp_path):
    (tmp_path / "env.txt").symlink_to("/proc/self/environ")
    for path in ("/dev/zero", "/proc/self/environ", tmp_path / "env.txt"):
        with pytest.raises(UserError, match="is under /(dev|proc)"):
            reading.read_bytes(path, what="run spec", limit=1000)


def test_a_fifo_is_refused_at_once_wherever_it_is_named(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    said: list[str] = []

    def plan() -> None:
        try:
            read_spec(fifo)
        except SpecError as exc:
            said.append(str(exc))

    worker = threading.Thread(target=plan, daemon=True)  # a read that blocked would leave it hanging, not the suite
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "reading a FIFO spec blocked"
    assert "is a FIFO, not a regular file" in said[0]
    tasks = tmp_path / "tasks.jsonl"
    os.mkfifo(tasks)
    with pytest.raises(UserError, match="is a FIFO"):
        jsonl_rows(tasks)


def test_a_tasks_file_over_the_cap_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "tasks.jsonl"
    with path.open("wb") as handle:
        handle.truncate(70_000_000)  # sparse: no disk, and never read
    with pytest.raises(UserError, match="over the 64,000,000 bytes a tasks file may hold"):
        jsonl_rows(path)
    path.write_text('{"prompt": "a"}\r\n{"prompt": "b"}\r\n', encoding="utf-8")
    assert jsonl_rows(path) == [{"prompt": "a"}, {"prompt": "b"}]


def test_a_text_target_is_read_as_on_disk(tmp_path):
    target = tmp_path / "prompt.md"
    target.write_bytes(b"Answer with the code.\r\n")
    spec = read_spec(domain.spec(tmp_path))
    assert build.read_target(spec) == "Answer with the code.\r\n"


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def test_the_cli_refuses_a_spec_that_is_dev_zero_within_seconds(service, tmp_path):
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for spec, said in ((tmp_path / "zero.yaml", "is under /dev"), (fifo, "is a FIFO")):
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "agentdescent", "plan", str(spec)], cwd=REPO,
                              capture_output=True, text=True, timeout=60, preexec_fn=_capped)
        assert done.returncode in (1, 2), done.stderr
        assert said in done.stderr and "MemoryError" not in done.stderr
        assert time.monotonic() - began < 30


def test_the_mcp_server_refuses_dev_zero_as_a_spec(service, tmp_path):
    async def main() -> None:
        async with mcp.Client(stdio_server(service.store.root.parent, tmp_path), mode="legacy") as client:
            with anyio.fail_after(30):
                said = await fails(client, "plan", spec="/dev/zero")
            assert "is under /dev" in said or "a character device" in said
            assert (await client.list_tools()).tools  # the server goes on serving

    anyio.run(main)


@pytest.mark.parametrize("encoding, said", [
    ("utf-32", "is UTF-32 (it starts with the byte-order mark FF FE 00 00); save it as UTF-8"),
    ("utf-16", "is UTF-16 (it starts with the byte-order mark FF FE); save it as UTF-8"),
    ("latin-1", "is not valid UTF-8 (byte 0xe9 at offset 3; Latin-1 or Windows-1252, as older editors save); save it"),
])
def test_a_text_file_in_another_encoding_is_named_with_it(tmp_path, encoding, said):
    (tmp_path / "p.md").write_bytes("café\n".encode(encoding))
    with pytest.raises(UserError) as caught:
        reading.read_text(tmp_path / "p.md", what="text target", limit=100)
    assert said in str(caught.value)
