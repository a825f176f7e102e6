"""Claude Code: our plugin, installed from a marketplace folder of our own with Claude Code's own commands.

`install` lays the marketplace the package ships (`bundle.files("marketplace")` beside
`plugins/claude-code/`, so a user who never cloned the repository has it) into
`$AGENTDESCENT_HOME/hosts/claude-code-marketplace`, then runs `claude plugin marketplace add DIR`
and `claude plugin install agentdescent@agentdescent` (`update` when it is in already, which
re-records the version of the files just written), as a user's `/plugin install` does. Claude
Code loads a plugin of a directory marketplace in place, so that folder must stay where it is:
`uninstall` removes it last, after `claude plugin uninstall` and `claude plugin marketplace remove`.
A marketplace laid out by install under another AGENTDESCENT_HOME (a `hosts/claude-code-marketplace`
folder holding our marketplace.json) is ours too: install moves it to this home's copy, and uninstall
takes it out the same way. One of the user's own that `install --force` replaces is recorded beside
our folder (`claude_replaced`), and uninstall adds it back. Installs and uninstalls of one folder
take turns (an flock beside it), and an install that fails takes out what it added.

`report` reads Claude Code's own records instead of running `claude plugin list` (half a second):
`plugins/installed_plugins.json` and `plugins/known_marketplaces.json` in its config folder
(`$CLAUDE_CONFIG_DIR`, default `~/.claude`), the `enabledPlugins` of its `settings.json`, and the
`mcpServers` of `.claude.json` (a server added with `claude mcp add agentdescent`). Left out:
project-scope installs, and the records' meaning beyond those fields.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentdescent import atomic, filelock, reading
from agentdescent.errors import UserError
from agentdescent.home import home
from agentdescent.hosts import bundle, claude_replaced, wiring
from agentdescent.hosts.base import Changed, HostReport, to_wire, version
from agentdescent.process import Killed, run_process

HOST = "claude-code"
PROGRAM = "claude"
SKILL = "skills/agentdescent/SKILL.md"  # in the bundle, which install lays out as a plugin of the marketplace
PLUGIN = "agentdescent@agentdescent"  # NAME@MARKETPLACE, as .claude-plugin/marketplace.json names them
MARKETPLACE = "agentdescent"
SERVER = "agentdescent"
TIMEOUT = 120.0  # seconds for one claude command
LOCK_WAIT = 5 * TIMEOUT  # an install or uninstall runs at most five claude commands


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
    elif _plugin_installed(enabled=False):
        how = f"plugin {PLUGIN} installed but disabled: `claude plugin enable {PLUGIN}` turns it back on"
    else:
        how = to_wire(HOST, found=claude is not None, product="Claude Code", package="@anthropic-ai/claude-code")
    return HostReport(host=HOST, installed=claude is not None, version=version(claude) if claude else None,
                      wired=plugin or server, how=how,
                      config=str(config_dir()))


def install(*, force: bool = False) -> Changed:
    """Lay out the bundled marketplace and install our plugin from it; again: already installed, or
    brought up to date. A marketplace named agentdescent that points elsewhere is refused without `force`,
    unless install laid it out under another AGENTDESCENT_HOME: that one moves to this home's copy."""
    claude = _require_claude("install")
    target = folder()
    with _locked(target, create=True):
        return _install(claude, target, force=force)


def _install(claude: str, target: Path, *, force: bool) -> Changed:
    where, before = _marketplace_path(), _marketplace_source()
    ours = where is not None and _same(where, target)
    moved = where if where is not None and not ours and _laid_out_by_us(where) else None
    theirs = where is not None and not ours and moved is None
    if theirs and not force:
        raise UserError(f"a Claude Code marketplace named {MARKETPLACE!r} is already added from {where}; its "
                        f"plugin works as well (`claude plugin install {PLUGIN}`), or `agentdescent install "
                        "claude-code --force` points it at the copy this package ships")
    had = _plugin_installed()
    if theirs and before is not None:  # the user's own marketplace, replaced on purpose: uninstall re-adds it
        # and installs again what was installed from it, our plugin's name too (uninstall takes out ours)
        installed = _read(config_dir() / "plugins" / "installed_plugins.json").get("plugins")
        claude_replaced.keep(target, before, sorted(p for p in (installed if isinstance(installed, dict) else {})
                                                    if p.endswith(f"@{MARKETPLACE}")))
    written = _materialise(target, rewrite=force)
    if not force and not written and ours and had:
        return Changed(host=HOST, action="install", message=f"Claude Code already has the plugin {PLUGIN} "
                       f"(from {target}); nothing to do", next="start a new Claude Code session to use it")
    commands: list[str] = []
    try:
        commands.append(_run(claude, "plugin", "marketplace", "add", str(target)))
        # an installed plugin loads in place from the folder; `update` re-records its version
        commands.append(_run(claude, "plugin", "update" if had else "install", PLUGIN))
    except UserError as exc:
        if ours:
            raise
        raise UserError(f"{exc}{_roll_back(claude, target, before, replaced=theirs)}") from None
    if moved is not None:
        claude_replaced.move(Path(moved), target)
        shutil.rmtree(moved, ignore_errors=True)  # the other home's copy, which Claude Code no longer reads
    return Changed(host=HOST, action="install", paths=[str(target / p) for p in written], commands=commands,
                   message=f"{'updated' if had else 'installed'} the Claude Code plugin {PLUGIN} from the marketplace "
                           f"in {target}" + (f" (moved from {moved}, laid out under another AGENTDESCENT_HOME)"
                                             if moved else ""),
                   next="start a new Claude Code session (or /reload-plugins): the agentdescent tools, the "
                        "skill and /agentdescent:evolve are there; `claude mcp get plugin:agentdescent:agentdescent` "
                        "checks the server")


def _roll_back(claude: str, target: Path, before: dict[str, Any] | None, *, replaced: bool) -> str:
    """Undo an install that failed after `marketplace add` may have gone through (it can record the
    marketplace and still fail): what points at `target` is removed, then the folder, and the
    marketplace added before (`before`) comes back. What the failure message gains ("" or a fix)."""
    if _points_at(target):
        _quiet(claude, "plugin", "marketplace", "remove", MARKETPLACE)
    shutil.rmtree(target, ignore_errors=True)
    if replaced:
        claude_replaced.record(target).unlink(missing_ok=True)
    if before is None or _marketplace_source() is not None:  # nothing was there, or the failed add left it
        return ""
    failed = _put_back(claude, before, [])
    return f"; the marketplace {MARKETPLACE!r} added before is not back: {failed}" if failed else ""


def uninstall() -> Changed:
    """Uninstall our plugin and remove our marketplace and its folder; a marketplace named
    agentdescent that `install` did not add (one pointing elsewhere) is left as it is."""
    source = _marketplace_path()
    target = Path(source) if source is not None and _laid_out_by_us(source) else folder()
    with _locked(target, create=False):
        return _uninstall(target)


def _uninstall(target: Path) -> Changed:
    source = _marketplace_path()  # again: an install may have ended while this waited for the lock
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
    said, then = f"uninstalled the Claude Code plugin {PLUGIN} and removed its marketplace", ""
    theirs = claude_replaced.replaced(target)
    if theirs is not None:  # the marketplace `install --force` replaced
        failed = _put_back(claude, theirs, commands)
        if failed:
            said += f"; your own marketplace {MARKETPLACE!r}, which install --force had replaced, is not back: {failed}"
            then = "add your marketplace again as that says, then "
        else:
            said += (f"; re-added your own marketplace {MARKETPLACE!r} from {claude_replaced.shown(theirs)}, which "
                     f"install --force had replaced{_reinstalled(claude, claude_replaced.plugins(target), commands)}")
    claude_replaced.record(target).unlink(missing_ok=True)
    changed = _forget(target, said)
    return changed.model_copy(update={"commands": commands, "next": f"{then}start a new Claude Code session"})


def _reinstalled(claude: str, plugins: list[str], commands: list[str]) -> str:
    """Install again the user's `plugins` that replacing their marketplace uninstalled; what to say of it."""
    done, failed = [], []
    for plugin in plugins:
        typed, failure = _attempt(claude, "plugin", "install", plugin)
        if failure:
            failed.append(f"`{typed}` {failure}")
        else:
            done.append(plugin)
            commands.append(typed)
    return (f", and installed again its plugins {', '.join(done)}" if done else "") + (
        f"; not installed again: {'; '.join(failed)}" if failed else "")


def _put_back(claude: str, source: dict[str, Any], commands: list[str]) -> str | None:
    """Add the marketplace `source` again, appending the command to `commands`; None when it is
    back, else why not and how to add it by hand."""
    args = claude_replaced.add_args(source)
    if args is None:
        return (f"`claude plugin marketplace add` cannot express its source ({json.dumps(source)}), so add it "
                "again the way you first did")
    typed, failure = _attempt(claude, "plugin", "marketplace", "add", *args)
    if failure is None:
        commands.append(typed)
        return None
    return f"`{typed}` {failure}; add it again by hand with `{typed}` once that is fixed"


def _forget(target: Path, message: str) -> Changed:
    removed = [str(target)] if target.exists() else []
    shutil.rmtree(target, ignore_errors=True)
    return Changed(host=HOST, action="uninstall", paths=removed, message=message)


@contextlib.contextmanager
def _locked(target: Path, *, create: bool) -> Iterator[None]:
    """Hold an flock on `claude-code.lock` beside `target` for the block: two installs or uninstalls
    at once would delete each other's files in the folder (temp files of writes in flight too).
    Without `create`, a home that has no such folder yet has nothing to guard."""
    lock = target.parent / "claude-code.lock"
    if not create and not lock.parent.is_dir():
        yield
        return
    with filelock.holding(lock, wait=LOCK_WAIT, busy=f"another `agentdescent install` or `uninstall claude-code` "
                          f"(process {{holder}}) has held {lock} for {LOCK_WAIT:g} s; wait for it to end (or stop it), "
                          "then try again"):
        yield


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
    typed, failure = _attempt(claude, *args)
    if failure is not None:
        raise UserError(f"`{typed}` {failure}; fix that and try again (`claude plugin list` and `claude plugin "
                        "marketplace list` show what Claude Code has)")
    return typed


def _attempt(claude: str, *args: str) -> tuple[str, str | None]:
    """Run `claude ARGS`: the command as typed, and None or what went wrong (its output's tail)."""
    typed = " ".join([PROGRAM, *args])
    try:
        done = run_process([claude, *args], timeout=TIMEOUT)
    except Killed as exc:
        return typed, f"{exc} ({_tail(exc.stderr)})"
    except OSError as exc:
        return typed, f"could not start: {exc}"
    if done.returncode != 0:
        return typed, f"failed (exit {done.returncode}): {_tail(done.stderr or done.stdout)}"
    return typed, None


def _quiet(claude: str, *args: str) -> None:
    try:
        run_process([claude, *args], timeout=TIMEOUT)
    except (OSError, Killed):
        pass  # undoing a half install: what is left, `agentdescent uninstall claude-code` takes out


def _tail(text: str, lines: int = 5) -> str:
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept)[-600:] or "no output"


def _read(path: Path) -> dict[str, Any]:
    """A JSON file of Claude Code's as a mapping; {} for one missing, unreadable or not a mapping
    (read as bounded data: a FIFO there is never waited on)."""
    try:
        data = json.loads(reading.read_text(path, what="Claude Code file", limit=wiring.CONFIG_BYTES))
    except (UserError, ValueError, RecursionError):
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
    source = entry["source"] if isinstance(entry.get("source"), dict) else {}
    found = source.get("path") or source.get("url") or source.get("repo") or entry.get("installLocation")
    return str(found) if found else "an unknown source"


def _marketplace_source() -> dict[str, Any] | None:
    """The source of the marketplace named agentdescent as known_marketplaces.json records it."""
    entry = _read(config_dir() / "plugins" / "known_marketplaces.json").get(MARKETPLACE)
    source = entry.get("source") if isinstance(entry, dict) else None
    return source if isinstance(source, dict) else None


def _points_at(target: Path) -> bool:
    where = _marketplace_path()
    return where is not None and _same(where, target)


def _server_added() -> bool:
    """An MCP server named agentdescent in .claude.json: user scope, or this folder's project scope."""
    data = _read(_claude_json())
    projects = data["projects"] if isinstance(data.get("projects"), dict) else {}
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
