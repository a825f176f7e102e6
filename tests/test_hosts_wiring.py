"""What `hosts.wiring` does for Codex and DeepSeek Harness alike, against the user's files as they
find them: an install made again (after its home went, or at the same time as another) still
records everything it has there; uninstall never takes the user's own for ours; a file it cannot
read, write or compare is refused with the fix, nothing changed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentdescent.errors import UserError
from agentdescent.hosts import codex, deepseek, wiring
from tests.mcp_support import REPO

USER_CONFIG = '# mine\nmodel = "o3"\n'


@pytest.fixture
def homes(tmp_path, monkeypatch) -> Path:
    """CODEX_HOME and DSH_HOME (not created yet), HOME and the run store, all the test's own."""
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "agentdescent"))
    return tmp_path


HOSTS = {"codex": (codex, "codex", "config.toml"), "deepseek": (deepseek, "dsh", "cordis.patch.yml")}


@pytest.mark.parametrize("name", HOSTS)
def test_an_install_again_after_its_home_was_removed_records_the_skill_and_the_file_it_made(homes, name):
    host, folder, config = HOSTS[name]
    skill = homes / folder / "skills" / "agentdescent" / "SKILL.md"
    host.install()
    shutil.rmtree(wiring.home())  # the user resets the run store, and the record goes with it
    assert "nothing changed" in host.install().message
    assert f"removed {skill}" in host.uninstall().message
    assert not skill.parent.exists() and not (homes / folder / config).exists()  # install made it: only our block


def test_a_second_install_at_once_waits_for_the_first_and_uninstall_then_takes_everything_out(homes, monkeypatch):
    config = homes / "codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(USER_CONFIG, encoding="utf-8")
    written, second = wiring.atomic.write_text, []

    def slow_write(path, text):  # the first install pauses as it writes its record, the skill and block in place
        if Path(path).suffix == ".json" and not second:
            second.append(subprocess.Popen([sys.executable, "-m", "agentdescent", "install", "codex", "--without-cli"],
                                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            with contextlib.suppress(subprocess.TimeoutExpired):
                second[0].wait(timeout=5)
            assert second[0].poll() is None, f"the second install did not wait for the first: {second[0].stdout.read()}"
        written(path, text)

    monkeypatch.setattr(wiring.atomic, "write_text", slow_write)
    codex.install()
    out, _ = second[0].communicate(timeout=120)
    assert second[0].returncode == 0 and "already installed for codex" in out, out
    monkeypatch.setattr(wiring.atomic, "write_text", written)
    codex.uninstall()
    assert config.read_text(encoding="utf-8") == USER_CONFIG and not (homes / "codex" / "skills").exists()


@pytest.mark.parametrize("name", HOSTS)
def test_a_config_that_is_a_symlink_loop_is_refused_and_reported_as_one(homes, name):
    host, folder, config = HOSTS[name]
    (homes / folder).mkdir()
    (homes / folder / config).symlink_to(config)
    for verb in (host.install, host.uninstall):
        with pytest.raises(UserError, match="is a symlink that leads back to itself .*remove the link"):
            verb()
    report = host.report()
    assert "leads back to itself" in report.problem and report.how.startswith(f"fix {homes / folder / config} first")
    assert not (homes / folder / "skills").exists()


@pytest.mark.parametrize("name", ["codex", "deepseek"])
def test_a_symlink_loop_is_one_where_a_lenient_resolve_returns_the_link_itself(homes, name, monkeypatch):
    """Python 3.13's Path.resolve() no longer raises on a loop: it returns the link, and the install
    said the link named a file that does not exist (create it, the advice went). Emulated here."""
    resolve = Path.resolve

    def as_in_313(self, strict=False):
        if not strict and self.is_symlink() and os.path.realpath(self) == str(self.absolute()):
            return self.absolute()
        return resolve(self, strict=strict)
    monkeypatch.setattr(Path, "resolve", as_in_313)
    test_a_config_that_is_a_symlink_loop_is_refused_and_reported_as_one(homes, name)


OWN = {"codex": '[mcp_servers.agentdescent]\ncommand = "/opt/my-build/agentdescent-mcp"\n',
       "deepseek": "- insert:\n    - id: agentdescent\n      name: my-own-build\n"}


@pytest.mark.parametrize("name", HOSTS)
def test_uninstall_leaves_a_server_of_the_users_own_named_agentdescent_and_says_whose_it_is(homes, name):
    host, folder, config = HOSTS[name]
    (homes / folder).mkdir()
    (homes / folder / config).write_text(OWN[name], encoding="utf-8")
    said = host.uninstall().message
    assert "named agentdescent in" in said and "is your own" in said and "still wires our" not in said, said
    assert (homes / folder / config).read_text(encoding="utf-8") == OWN[name]


@pytest.mark.parametrize("name", HOSTS)
def test_a_read_only_config_is_neither_wired_nor_unwired_and_the_message_says_how(homes, name):
    host, folder, config = HOSTS[name]
    path = homes / folder / config
    path.parent.mkdir()
    path.write_text(USER_CONFIG if name == "codex" else "# mine\n", encoding="utf-8")
    before = path.read_bytes()
    path.chmod(0o444)
    with pytest.raises(UserError, match=r"is read-only \(mode 444\), so `agentdescent install .*` changed nothing: "
                                        "make it writable .*or add our lines to it by hand"):
        host.install()
    assert path.read_bytes() == before and not (homes / folder / "skills").exists()
    path.chmod(0o644)
    host.install()
    wired = path.read_bytes()
    path.chmod(0o444)
    with pytest.raises(UserError, match=r"is read-only .*`agentdescent uninstall .*` changed nothing.* markers out by hand"):
        host.uninstall()
    assert path.read_bytes() == wired and (homes / folder / "skills" / "agentdescent" / "SKILL.md").exists()
