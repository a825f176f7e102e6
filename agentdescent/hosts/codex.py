"""Codex: our MCP server as a marked block in `$CODEX_HOME/config.toml`, the skill in `$CODEX_HOME/skills`.

`install` appends the `[mcp_servers.agentdescent]` table the package ships (plugins/codex/config.toml)
to the user's config.toml (CODEX_HOME defaults to `~/.codex`) between marker lines (`marked`),
after checking with tomllib that the file then parses and reads exactly as before plus our table.
It refuses, changing nothing, when the user has an `agentdescent` server of their own, or when our
table cannot join theirs (an inline `mcp_servers = {...}` cannot be extended by another table).
`force` overrides neither: TOML defines a table once, and replacing the user's would mean editing
their lines. It only lets install replace a SKILL.md at our path that is not the one it wrote,
and our block where the user edited it since install (a second install keeps such a block). A
byte order mark before the file, which Codex skips, is skipped too.

The skill goes to `$CODEX_HOME/skills/agentdescent/SKILL.md`, which Codex 0.171.0 lists as a user
skill; `~/.agents/skills`, which Codex reads too, is also DeepSeek Harness's, where a second copy
would show the skill twice. Codex gives an MCP server the session's folder as its working folder,
and passes it only the environment variables the block's `env_vars` names.

What install created is recorded in `$AGENTDESCENT_HOME/hosts/codex.json` (and the block's first line
names that record, for an uninstall with another home): the file the block is in (and whether
install created it), each file install wrote with its sha256, the folders it made. `uninstall`
takes out exactly that: our block (every other byte of config.toml stays), a file only
while it is unchanged since install (an edited skill stays, and the answer says so), the folders
once empty (`wiring`, which the DeepSeek Harness module uses too).

Left out: a project's `.codex/config.toml`, Codex plugins and marketplaces, `codex mcp add`.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from agentdescent.errors import UserError
from agentdescent.hosts import bundle, marked
from agentdescent.hosts.base import Changed, HostReport, to_wire, version, wired_in
from agentdescent.hosts.wiring import Wiring, put_in, read_text, take_out

HOST = "codex"
PROGRAM = "codex"
SERVER = "agentdescent"
SKILL = "skills/agentdescent/SKILL.md"  # in the bundle, and under CODEX_HOME


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser().absolute()


def report() -> HostReport:
    """How Codex stands here; never raises, and runs at most `codex --version`."""
    codex = shutil.which(PROGRAM)
    config = codex_home() / "config.toml"
    text, read, problem = "", {}, None
    try:
        text = read_text(config) or ""
        read = _toml(text)
    except UserError as exc:
        text, problem = "", str(exc)
    except tomllib.TOMLDecodeError as exc:
        text, problem = "", f"{config} is not valid TOML ({exc}), so Codex cannot read it: fix it"
    wired = _names_us(read)
    how = wired_in(HOST, config, marked.present(text)) if wired else to_wire(
        HOST, found=codex is not None, product="Codex", package="@openai/codex")
    if problem:
        how = f"fix {config} first (its problem is below), then {how}"
    return HostReport(host=HOST, installed=codex is not None, version=version(codex) if codex else None,
                      wired=wired, how=how, config=str(config), problem=problem)


def install(*, force: bool = False) -> Changed:
    """Wire our server into config.toml and put the skill beside it; again: nothing changes, or our
    block and skill are brought up to date."""
    changed = put_in(_wiring(), force=force)
    if changed.paths:
        changed = changed.model_copy(update={"next": "start a new Codex session: `codex mcp list` lists agentdescent, "
                                                     "and its tools are there"})
    return changed


def uninstall() -> Changed:
    """Take our block out of config.toml and the skill out of `$CODEX_HOME/skills` (see the module docstring)."""
    return take_out(_wiring())


def _wiring() -> Wiring:
    files = bundle.files(HOST)
    return Wiring(host=HOST, config=codex_home() / "config.toml", block=files["config.toml"], check=_check_toml,
                  files={codex_home() / SKILL: files[SKILL]}, parses=_parses_toml, wired=_wires_us,
                  unwire=f"`codex mcp remove {SERVER}` takes it out")


def _check_toml(user: str, new: str, config: Path) -> None:
    """Refuse unless `new` parses and reads as `user` plus our table."""
    try:
        mine = _toml(user)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{config} is not valid TOML ({exc}): fix it (Codex cannot read it either), then install "
                        "again") from None
    if _names_us(mine):
        raise UserError(f"{config} already has an [mcp_servers.{SERVER}] of its own, so Codex is wired already; to "
                        "have `agentdescent install codex` manage it instead, delete that table and install again")
    if not isinstance(mine.get("mcp_servers", {}), dict):  # `[[mcp_servers]]`: our table would go inside its last
        raise UserError(f"{config} has mcp_servers as {_kind(mine['mcp_servers'])}, not the table of servers Codex "
                        "reads: write each server as an [mcp_servers.NAME] table, then install again")
    ours = tomllib.loads(bundle.files(HOST)["config.toml"])["mcp_servers"][SERVER]
    try:
        result = _toml(new)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"adding [mcp_servers.{SERVER}] to {config} would make it invalid TOML ({exc}); this happens "
                        "when mcp_servers is not a table of tables, such as an inline `mcp_servers = {...}`, which no "
                        "other table may extend: write each server as an [mcp_servers.NAME] table, then install "
                        "again") from None
    expected = copy.deepcopy(mine)
    expected.setdefault("mcp_servers", {})[SERVER] = ours
    if result != expected:
        raise UserError(f"appending [mcp_servers.{SERVER}] to {config} would change how the rest of it reads; add "
                        "the table by hand (docs/runs.md shows it)")


def _toml(text: str) -> dict:
    """`text` as TOML, as Codex reads it: a byte order mark before it is not TOML's, and Codex skips it."""
    return tomllib.loads(text.removeprefix("\ufeff"))


def _kind(value: object) -> str:
    """What a TOML value is, in the words of the file: _kind([{}]) == "an array of tables ([[mcp_servers]])" """
    if isinstance(value, list):
        return "an array of tables ([[mcp_servers]])" if all(isinstance(v, dict) for v in value) else "an array"
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a float"}.get(type(value), "a date or time")


def _wires_us(text: str) -> bool:
    try:
        return _names_us(_toml(text))
    except tomllib.TOMLDecodeError:
        return False


def _names_us(config: dict) -> bool:
    """Whether a config, as read, has our server."""
    servers = config.get("mcp_servers")
    return isinstance(servers, dict) and SERVER in servers


def _parses_toml(text: str) -> bool:
    try:
        _toml(text)
    except tomllib.TOMLDecodeError:
        return False
    return True
