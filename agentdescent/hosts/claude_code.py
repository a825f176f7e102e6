"""Claude Code: our plugin, installed from a marketplace folder of our own with Claude Code's own commands.

`install` lays the marketplace the package ships (`bundle.files("marketplace")` beside
`plugins/claude-code/`, so a user who never cloned the repository has it) into
`$AGENTDESCENT_HOME/hosts/claude-code-marketplace`, then runs `claude plugin marketplace add DIR`
and `claude plugin install agentdescent@agentdescent` (`update` when it is in already, which
re-records the version of the files just written), as a user's `/plugin install` does. Claude
Code loads a plugin of a directory marketplace in place, so that folder must stay where it is:
`uninstall` removes it last, after `claude plugin uninstall` and `claude plugin marketplace remove`.
A marketplace laid out by install under another AGENTDESCENT_HOME (a `hosts/claude-code-marketplace`
folder holding our marketplace.json) is ours too, and uninstall takes it out the same way.

`report` reads Claude Code's own records instead of running `claude plugin list` (half a second):
`plugins/installed_plugins.json` and `plugins/known_marketplaces.json` in its config folder
(`$CLAUDE_CONFIG_DIR`, default `~/.claude`), the `enabledPlugins` of its `settings.json`, and the
`mcpServers` of `.claude.json` (a server added with `claude mcp add agentdescent`). Left out:
project-scope installs, and the records' meaning beyond those fields.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from agentdescent import atomic
from agentdescent.errors import UserError
from agentdescent.home import home
from agentdescent.hosts import bundle
from agentdescent.hosts.base import Changed, HostReport, to_wire, version
from agentdescent.process import Killed, run_process

HOST = "claude-code"
PROGRAM = "claude"
SKILL = "skills/agentdescent/SKILL.md"  # in the bundle, which install lays out as a plugin of the marketplace
PLUGIN = "agentdescent@agentdescent"  # NAME@MARKETPLACE, as .claude-plugin/marketplace.json names them
MARKETPLACE = "agentdescent"
SERVER = "agentdescent"
TIMEOUT = 120.0  # seconds for one claude command


def folder() -> Path:
    """Where `install` lays the marketplace out, and where Claude Code reads the plugin from."""
    return home() / "hosts" / "claude-code-marketplace"


def config_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


def _claude_json() -> Path:
    # with CLAUDE_CONFIG_DIR set, .claude.json lives inside it; otherwise beside ~/.claude
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base).expanduser() if base else Path.home()) / ".claude.json"


def report() -> HostReport:
    """How Claude Code stands here; never raises, and runs at most `claude --version`."""
    claude = shutil.which(PROGRAM)
    plugin, server = _plugin_installed(), _server_added()
    source = _marketplace_path()
    if plugin and source is not None and not Path(source).is_dir():  # its folder deleted (a store reset): it cannot load
        plugin, how = False, (f"plugin {PLUGIN} installed, but its marketplace folder {source} is gone, so it cannot "
                              f"load: agentdescent install {HOST} lays it out again")
    elif plugin:
        how = f"plugin {PLUGIN} installed (from {source or 'its marketplace'})"
    elif server:
        how = f"MCP server {SERVER!r} in {_claude_json()}"
    else:
        how = to_wire(HOST, found=claude is not None, product="Claude Code", package="@anthropic-ai/claude-code")
    return HostReport(host=HOST, installed=claude is not None, version=version(claude) if claude else None,
                      wired=plugin or server, how=how,
                      config=str(config_dir()))


def install(*, force: bool = False) -> Changed:
    """Lay out the bundled marketplace and install our plugin from it; again: already installed, or
    brought up to date. A marketplace named agentdescent that points elsewhere is refused without `force`."""
    claude = _require_claude("install")
    target = folder()
    elsewhere = _marketplace_path()
    if elsewhere and not _same(elsewhere, target) and not force:
        raise UserError(f"a Claude Code marketplace named {MARKETPLACE!r} is already added from {elsewhere}; its "
                        f"plugin works as well (`claude plugin install {PLUGIN}`), or `agentdescent install "
                        "claude-code --force` points it at the copy this package ships")
    fresh, had = not target.exists(), _plugin_installed()
    if elsewhere and not _same(elsewhere, target):  # the user's own marketplace, replaced on purpose: uninstall re-adds it
        atomic.write_text(_replaced_record(), json.dumps({"marketplace": str(elsewhere)}))
    written = _materialise(target, rewrite=force)
    if not force and not written and elsewhere and _same(elsewhere, target) and had:
        return Changed(host=HOST, action="install", message=f"Claude Code already has the plugin {PLUGIN} "
                       f"(from {target}); nothing to do", next="start a new Claude Code session to use it")
    commands: list[str] = []
    try:
        commands.append(_run(claude, "plugin", "marketplace", "add", str(target)))
        # an installed plugin loads in place from the folder; `update` re-records its version
        commands.append(_run(claude, "plugin", "update" if had else "install", PLUGIN))
    except UserError:
        if fresh:
            if commands:
                _quiet(claude, "plugin", "marketplace", "remove", MARKETPLACE)
            shutil.rmtree(target, ignore_errors=True)
        raise
    return Changed(host=HOST, action="install", paths=[str(target / p) for p in written], commands=commands,
                   message=f"{'updated' if had else 'installed'} the Claude Code plugin {PLUGIN} from the marketplace "
                           f"in {target}",
                   next="start a new Claude Code session (or /reload-plugins): the agentdescent tools, the "
                        "skill and /agentdescent:evolve are there; `claude mcp get plugin:agentdescent:agentdescent` "
                        "checks the server")


def uninstall() -> Changed:
    """Uninstall our plugin and remove our marketplace and its folder; a marketplace named
    agentdescent that `install` did not add (one pointing elsewhere) is left as it is."""
    source = _marketplace_path()
    target = Path(source) if source is not None and _laid_out_by_us(source) else folder()
    ours = source is None or _same(source, target)
    if not ours:
        return _forget(target, f"left the marketplace {MARKETPLACE!r} from {source} and its plugin as they are: "
                               f"`agentdescent install` did not add them (`claude plugin uninstall {PLUGIN}` "
                               "and `claude plugin marketplace remove agentdescent` do)")
    plugin = _plugin_installed(enabled=False)
    if not plugin and source is None:
        return _forget(target, f"Claude Code has no plugin {PLUGIN} from us; nothing to uninstall")
    claude = _require_claude("uninstall")
    commands = []
    if plugin:
        commands.append(_run(claude, "plugin", "uninstall", PLUGIN))
    if source is not None:
        commands.append(_run(claude, "plugin", "marketplace", "remove", MARKETPLACE))
    said = f"uninstalled the Claude Code plugin {PLUGIN} and removed its marketplace"
    theirs = _replaced()
    if theirs is not None and Path(theirs).exists():  # the marketplace `install --force` replaced
        commands.append(_run(claude, "plugin", "marketplace", "add", theirs))
        said += (f"; re-added your own marketplace {MARKETPLACE!r} from {theirs}, which install --force had replaced "
                 f"(`claude plugin install {PLUGIN}` installs its plugin again)")
    _replaced_record().unlink(missing_ok=True)
    changed = _forget(target, said)
    return changed.model_copy(update={"commands": commands, "next": "start a new Claude Code session"})


def _replaced_record() -> Path:
    return home() / "hosts" / "claude-code-replaced.json"


def _replaced() -> str | None:
    """The folder of the user's own marketplace that `install --force` replaced, if one was."""
    try:
        found = json.loads(_replaced_record().read_text(encoding="utf-8")).get("marketplace")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _forget(target: Path, message: str) -> Changed:
    removed = [str(target)] if target.exists() else []
    shutil.rmtree(target, ignore_errors=True)
    return Changed(host=HOST, action="uninstall", paths=removed, message=message)


def _materialise(target: Path, *, rewrite: bool) -> list[str]:
    """Write the bundled marketplace under `target`: the relative paths written (files of an older
    bundle that this one no longer has are removed, and listed too)."""
    wanted = {**bundle.files("marketplace"),
              **{f"plugins/claude-code/{path}": text for path, text in bundle.files("claude-code").items()}}
    changed = []
    for path, text in sorted(wanted.items()):
        file = target / path
        if rewrite or not file.is_file() or file.read_text(encoding="utf-8") != text:
            atomic.write_text(file, text)
            changed.append(path)
    for file in sorted(p for p in target.rglob("*") if p.is_file()):
        if file.relative_to(target).as_posix() not in wanted:
            file.unlink()
            changed.append(file.relative_to(target).as_posix())
    return changed


def _require_claude(verb: str) -> str:
    claude = shutil.which(PROGRAM)
    if claude is None:
        raise UserError(f"Claude Code's `claude` is not on PATH: install it (npm install -g @anthropic-ai/claude-code) "
                        f"or put its folder on PATH, then run `agentdescent {verb} claude-code` again")
    return claude


def _run(claude: str, *args: str) -> str:
    """Run `claude ARGS`; the command as typed. A failure is a `UserError` quoting its output's tail."""
    typed = " ".join([PROGRAM, *args])
    try:
        done = run_process([claude, *args], timeout=TIMEOUT)
    except Killed as exc:
        raise UserError(f"`{typed}` {exc} ({_tail(exc.stderr)}); run it yourself to see what it does") from None
    except OSError as exc:
        raise UserError(f"`{typed}` could not start: {exc}") from None
    if done.returncode != 0:
        raise UserError(f"`{typed}` failed (exit {done.returncode}): {_tail(done.stderr or done.stdout)}; fix "
                        "that and try again (`claude plugin list` and `claude plugin marketplace list` show what "
                        "Claude Code has)")
    return typed


def _quiet(claude: str, *args: str) -> None:
    try:
        run_process([claude, *args], timeout=TIMEOUT)
    except (OSError, Killed):
        pass  # undoing a half install: what is left, `agentdescent uninstall claude-code` takes out


def _tail(text: str, lines: int = 5) -> str:
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept)[-600:] or "no output"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _plugin_installed(*, enabled: bool = True) -> bool:
    """Our plugin is in installed_plugins.json (and, with `enabled`, not disabled in settings.json)."""
    plugins = _read(config_dir() / "plugins" / "installed_plugins.json").get("plugins")
    if not isinstance(plugins, dict) or not plugins.get(PLUGIN):
        return False
    if not enabled:
        return True
    settings = _read(config_dir() / "settings.json").get("enabledPlugins")
    return not (isinstance(settings, dict) and settings.get(PLUGIN) is False)


def _marketplace_path() -> str | None:
    """The folder (or URL) the marketplace named agentdescent is added from; None when it is not added."""
    entry = _read(config_dir() / "plugins" / "known_marketplaces.json").get(MARKETPLACE)
    if not isinstance(entry, dict):
        return None
    source = entry.get("source") if isinstance(entry.get("source"), dict) else {}
    found = source.get("path") or source.get("url") or source.get("repo") or entry.get("installLocation")
    return str(found) if found else "an unknown source"


def _server_added() -> bool:
    """An MCP server named agentdescent in .claude.json: user scope, or this folder's project scope."""
    data = _read(_claude_json())
    projects = data.get("projects") if isinstance(data.get("projects"), dict) else {}
    here = projects.get(str(Path.cwd()))
    scopes = [data.get("mcpServers"), here.get("mcpServers") if isinstance(here, dict) else None]
    return any(isinstance(servers, dict) and SERVER in servers for servers in scopes)


def _laid_out_by_us(source: str) -> bool:
    """Whether `source` is a marketplace `install` laid out, under this AGENTDESCENT_HOME or another."""
    path = Path(source).expanduser()
    if path.name != folder().name or path.parent.name != folder().parent.name:
        return False
    return _read(path / ".claude-plugin" / "marketplace.json").get("name") == MARKETPLACE


def _same(source: str, target: Path) -> bool:
    return Path(source).expanduser().resolve() == target.resolve()
