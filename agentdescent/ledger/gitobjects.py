"""Git objects as bytes for the ledger: commit messages with trailers, commits, trees.

Pure functions, no I/O: the ledger stores what these produce. Left out: reading or writing a
repository.
"""

from __future__ import annotations

import io
import time
from collections.abc import Mapping
from dataclasses import dataclass

from git.objects.fun import tree_to_stream

from agentdescent.errors import UserError

IDENTITY = b"AgentDescent <agentdescent@localhost>"
BLOB_MODE, TREE_MODE = 0o100644, 0o040000


@dataclass(frozen=True)
class CommitInfo:
    """A parsed ledger commit."""

    tree: bytes
    parent: bytes | None
    version: int
    subject: str
    trailers: dict[str, str]



def format_message(subject: str, trailers: Mapping[str, str], version: int) -> str:
    subject = " ".join(subject.splitlines()).strip() or "update"
    lines = [f"Version: {version}"]
    for key, value in trailers.items():
        if not isinstance(key, str) or not key.replace("-", "").isalnum() or key == "Version":
            raise UserError(f"invalid trailer key {key!r}: use letters, digits and '-' "
                            "('Version' is reserved)")
        lines.append(f"{key}: {' '.join(str(value).splitlines())}")
    return subject + "\n\n" + "\n".join(lines) + "\n"


def commit_bytes(tree: bytes, parent: bytes | None, message: str) -> bytes:
    person = IDENTITY + b" %d +0000" % int(time.time())
    lines = [b"tree " + tree.hex().encode()]
    if parent is not None:
        lines.append(b"parent " + parent.hex().encode())
    lines += [b"author " + person, b"committer " + person]
    return b"\n".join(lines) + b"\n\n" + message.encode("utf-8")


def parse_commit(data: bytes) -> CommitInfo:
    header, _, body = data.partition(b"\n\n")
    fields: dict[bytes, bytes] = {}
    for line in header.split(b"\n"):
        name, _, value = line.partition(b" ")
        fields.setdefault(name, value)
    text = body.decode("utf-8", "replace").rstrip("\n")
    last_paragraph = text.split("\n\n")[-1].split("\n")
    trailers = dict(line.split(": ", 1) for line in last_paragraph if ": " in line)
    parent = fields.get(b"parent")
    return CommitInfo(
        tree=bytes.fromhex(fields[b"tree"].decode()),
        parent=bytes.fromhex(parent.decode()) if parent else None,
        version=int(trailers["Version"]),
        subject=text.split("\n", 1)[0],
        trailers=trailers,
    )


def tree_bytes(entries: Mapping[str, tuple[int, bytes]]) -> bytes:
    """Serialise {name: (mode, binsha)} in git's order (folders sort as 'name/')."""
    order = sorted(entries, key=lambda n: n.encode() + (b"/" if entries[n][0] == TREE_MODE else b""))
    buf = io.BytesIO()
    try:
        tree_to_stream([(entries[n][1], entries[n][0], n) for n in order], buf.write)
    except ValueError as exc:
        raise UserError(f"invalid key or artifact name: {exc}") from None
    return buf.getvalue()


def nest(blobs: Mapping[str, bytes]) -> dict:
    root: dict = {}
    for key, binsha in blobs.items():
        *folders, name = key.split("/")
        node = root
        for folder in folders:
            node = node.setdefault(folder, {})
        node[name] = binsha
    return root
