"""DeepSeek Harness: our MCP server as a marked row in `$DSH_HOME/cordis.patch.yml`, the skill in `$DSH_HOME/skills`.

The harness builds its plugin tree from layers of patch files; `$DSH_HOME/cordis.patch.yml` (DSH_HOME
defaults to `~/.dsh`) is the user's own layer, a top-level YAML list of operations. `install` appends
the operation the package ships (plugins/deepseek/cordis.patch.yml: an `- insert:` of one
`@deepseek-ai/dsh-mcp-client` row that starts `agentdescent-mcp` over stdio) between marker lines
(`marked`), after checking that the file then loads, reads exactly as before plus our operation,
and has one row that starts the entry point (a file whose aliases expand it past `VALUES` values
is refused first: comparing what it reads as would walk every copy). It loads with `TolerantLoader`, a SafeLoader that
reads a value under a tag it does not know (the harness's `!!js process.cwd()`) as the plain value.
It refuses, changing nothing, when the user's layer has a row or server named `agentdescent` of its
own, or is not a block list our operation can join (a flow list `[...]`, a mapping); `force` only
lets it replace a SKILL.md at our path that it did not write. The manifest, the byte-for-byte
uninstall and the rest are `wiring`'s, as for Codex.

The skill goes to `$DSH_HOME/skills/agentdescent/SKILL.md`. The harness reads skills from
`<project>/.dsh/skills`, `<project>/.agents/skills`, `$DSH_HOME/skills` and `~/.agents/skills`, in
that order; the last is Codex's user folder too, where a second copy would show the skill twice in
Codex, so the harness's own user folder is the right one for a user-level install.

The harness starts a stdio server with a scrubbed environment plus the row's `env` (so says its
configuration reference), and the shipped row has no `env`: under the harness, AGENTDESCENT_HOME and
the provider keys of the user's shell may not reach our server.

Not run against a live dsh: its current releases do not start on the machines this was built and
tested on (a dependency is missing from the registry), so the tests load the YAML and check what
it names; nothing here has been seen working inside the harness. Left out: project layers and
profiles (`$DSH_HOME/profiles/NAME/cordis.patch.yml`), and `dsh plugin`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from agentdescent.errors import UserError
from agentdescent.hosts import bundle, marked, wiring
from agentdescent.hosts.base import Changed, HostReport, to_wire, version, wired_in

HOST = "deepseek"
PROGRAM = "dsh"
SERVER = "agentdescent"
CLIENT = "@deepseek-ai/dsh-mcp-client"
ENTRY_POINT = "agentdescent-mcp"
SKILL = ".agents/skills/agentdescent/SKILL.md"  # in the bundle; installed as $DSH_HOME/skills/agentdescent/SKILL.md
VALUES = 100_000  # values a patch file may read as, its aliases expanded: far past any layer a person writes


class TolerantLoader(yaml.SafeLoader):
    """A SafeLoader that reads a node under a tag it does not know as the plain value:
    `cwd: !!js process.cwd()` loads as {"cwd": "process.cwd()"}."""


def _untagged(loader: TolerantLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    assert isinstance(node, yaml.MappingNode), f"a YAML node is a scalar, a sequence or a mapping, not {node!r}"
    return loader.construct_mapping(node, deep=True)


TolerantLoader.add_multi_constructor("", _untagged)  # exact constructors (the standard tags) still come first


def load(text: str) -> Any:
    """A patch file's operations as plain data (None for a file of only comments)."""
    return _nested(yaml.load, text)  # a SafeLoader subclass: plain data only


def _nested(read: Any, text: str) -> Any:
    """`read(text, Loader=TolerantLoader)`, a file nested past Python's recursion limit a YAMLError."""
    try:
        return read(text, Loader=TolerantLoader)
    except RecursionError:
        raise yaml.YAMLError("it is nested deeper than it can be read") from None


def dsh_home() -> Path:
    return Path(os.environ.get("DSH_HOME") or Path.home() / ".dsh").expanduser().absolute()


def report() -> HostReport:
    """How the harness stands here; never raises, and runs at most `dsh --version`."""
    dsh = shutil.which(PROGRAM)
    patch = dsh_home() / "cordis.patch.yml"
    problem = None
    try:
        text = wiring.read_text(patch) or ""
    except UserError as exc:
        text, problem = "", str(exc)
    wired = _wires_us(text)
    how = wired_in(HOST, patch, marked.present(text)) if wired else to_wire(
        HOST, found=dsh is not None, product="DeepSeek Harness", package="@deepseek-ai/dsh")
    if problem:
        how = f"fix {patch} first (its problem is below), then {how}"
    return HostReport(host=HOST, installed=dsh is not None, version=version(dsh) if dsh else None,
                      wired=wired, how=how, config=str(patch), problem=problem)


def install(*, force: bool = False) -> Changed:
    """Add our row to the user's patch layer and put the skill in `$DSH_HOME/skills`; again: nothing
    changes, or our row and skill are brought up to date."""
    changed = wiring.put_in(_wiring(), force=force)
    if changed.paths:
        changed = changed.model_copy(update={"next": "the harness reloads its patch layer by itself (or restart dsh); "
                                                     "its tools are named mcp__agentdescent__TOOL"})
    return changed


def uninstall() -> Changed:
    """Take our row out of the patch layer and the skill out of `$DSH_HOME/skills`."""
    return wiring.take_out(_wiring())


def _wiring() -> wiring.Wiring:
    files = bundle.files(HOST)
    return wiring.Wiring(host=HOST, config=dsh_home() / "cordis.patch.yml", block=files["cordis.patch.yml"],
                        check=_check_yaml, parses=_parses_yaml, wired=_wires_us,
                        unwire=f"take the rows that start {ENTRY_POINT} out of {dsh_home() / 'cordis.patch.yml'} by hand",
                        files={dsh_home() / "skills" / "agentdescent" / "SKILL.md": files[SKILL]})


def _check_yaml(user: str, new: str, patch: Path) -> None:
    """Refuse unless `new` loads as `user`'s operations plus ours, with one row starting the entry point."""
    try:
        mine = load(user)
        expanded = _expanded(user)
    except yaml.YAMLError as exc:
        raise UserError(f"{patch} is not valid YAML ({_short(exc)}): fix it (the harness cannot read it either), "
                        "then install again") from None
    if expanded > VALUES:  # comparing what it reads as would walk every copy
        raise UserError(f"{patch} has aliases (`*name`) that repeat its values past {VALUES} once expanded (or without "
                        "end), which the harness would expand too: write those operations out without such aliases, "
                        f"or add the {CLIENT} row by hand")
    if mine is not None and not isinstance(mine, list):
        raise UserError(f"{patch} is not a YAML list of operations (`- insert:` ...); fix it, then install again")
    if _rows(mine, _named_us):
        raise UserError(f"{patch} already has a row or server named {SERVER!r} of its own, so the harness is wired "
                        "already; to have `agentdescent install deepseek` manage it instead, delete that row and "
                        "install again")
    try:
        result = load(new)
    except yaml.YAMLError as exc:
        raise UserError(f"appending our operation to {patch} would make it invalid YAML ({_short(exc)}); this happens "
                        "when the file is a flow list (`[...]`) or ends its document (`...`): write each operation on a "
                        "`- ` line of its own, then install again") from None
    if result != (mine or []) + load(bundle.files(HOST)["cordis.patch.yml"]):
        raise UserError(f"appending our operation to {patch} would change how the rest of it reads; add the "
                        f"{CLIENT} row by hand")
    if len(_rows(result, _starts_us)) != 1:
        raise UserError(f"{patch} would not have exactly one {CLIENT} row starting {ENTRY_POINT}; add it by hand")


def _expanded(text: str) -> int:
    """How many values `text` reads as once its aliases are expanded, past VALUES for one that refers
    to itself; each node is counted once, so a file of nested aliases costs what its lines do."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) not in sizes:
            sizes[id(node)] = VALUES + 1  # while its children are counted: met again, it holds itself
            children = ([part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else
                        node.value if isinstance(node, yaml.SequenceNode) else [])
            sizes[id(node)] = min(1 + sum(size(child) for child in children), VALUES + 1)
        return sizes[id(node)]

    root = _nested(yaml.compose, text)
    return 0 if root is None else size(root)


def _wires_us(text: str) -> bool:
    try:
        return bool(_rows(load(text), lambda row: _starts_us(row) or _named_us(row)))
    except yaml.YAMLError:
        return False


def _parses_yaml(text: str) -> bool:
    try:
        load(text)
    except yaml.YAMLError:
        return False
    return True


def _rows(operations: Any, keep: Any) -> list[dict[str, Any]]:
    """The rows of every `- insert:` operation that `keep(row)` is true for."""
    rows = [row for op in operations if isinstance(op, dict) and isinstance(op.get("insert"), list)
            for row in op["insert"] if isinstance(row, dict)] if isinstance(operations, list) else []
    return [row for row in rows if keep(row)]


def _config(row: dict[str, Any]) -> dict[str, Any]:
    return row["config"] if isinstance(row.get("config"), dict) else {}


def _named_us(row: dict[str, Any]) -> bool:
    return row.get("id") == SERVER or (row.get("name") == CLIENT and _config(row).get("serverName") == SERVER)


def _starts_us(row: dict[str, Any]) -> bool:
    return row.get("name") == CLIENT and _config(row).get("command") == ENTRY_POINT


def _short(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).split())[:300]
