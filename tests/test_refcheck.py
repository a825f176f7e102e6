"""`python:` refs are checked in a child process (`agentdescent.refcheck`): plan and start never
import the user's code, the MCP server's protocol stream stays clean whatever a module prints,
and the user's code runs only in the run's own process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp
import pytest

from agentdescent import refcheck
from agentdescent.refcheck import check, check_refs
from tests import keyword_domain as domain
from tests.mcp_support import REPO, call, fails, stdio_server
from tests.runs_support import wait

KEY = "sk-live-0c2b9d1a7e3f5c7f3a9c2e1b5d8a4f6e"
RECORDER = """\
import os, sys
sys.path.insert(0, {repo!r})
from tests.keyword_domain import answer, next_rule
with open({marker!r}, "a", encoding="utf-8") as handle:
    handle.write(f"{{os.getpid()}}\\n")

def reward(task, output):
    return float(output.strip() == task.gold)
"""


def _modules(folder: Path, **sources: str) -> None:
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")


def test_each_ref_is_judged_in_a_child_with_what_it_printed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    _modules(tmp_path, chatty="import os\nprint('hello', os.environ['OPENAI_API_KEY'])\ndef fn(): pass\nvalue = 3\n",
             broken="raise RuntimeError('no database here')\n", leaves="raise SystemExit('bye')\n")
    said = check_refs(["chatty:fn", "chatty:value", "chatty:missing", "broken:fn", "leaves:fn", "no_such_module_here:fn",
                       "json:loads"], cwd=tmp_path, timeout=20)
    assert said["chatty:fn"] is None and said["json:loads"] is None
    assert said["chatty:value"].startswith("'value' is a value of type int, not a function or a class; it printed: hello")
    assert "AttributeError" in said["chatty:missing"]
    assert KEY not in said["chatty:value"] and "[redacted OPENAI_API_KEY]" in said["chatty:value"]
    assert "RuntimeError: no database here" in said["broken:fn"] and "SystemExit: bye" in said["leaves:fn"]
    assert "No module named 'no_such_module_here'" in said["no_such_module_here:fn"]
    assert "chatty" not in sys.modules and "broken" not in sys.modules


def _counted(monkeypatch) -> list[list[str]]:
    """The command lines of the processes `refcheck` starts from now on."""
    started, popen = [], subprocess.Popen

    def counting(argv, *args, **kwargs):
        started.append(list(argv))
        return popen(argv, *args, **kwargs)

    monkeypatch.setattr(refcheck.subprocess, "Popen", counting)
    return started


def test_one_child_imports_every_ref_of_a_check_and_tries_the_scorer(tmp_path, monkeypatch):
    _modules(tmp_path, agent="def answer(prompt):\n    return prompt\n", reflector="def propose(prompt):\n    return ''\n",
             scorer="print('scorer loaded')\ndef reward(task, output):\n    return 2.0\n")
    started = _counted(monkeypatch)
    assert check_refs([]) == {} and started == []  # nothing to check: no process
    assert check_refs(["agent:answer", "reflector:propose", "reflector:missing"], cwd=tmp_path, timeout=20) == {
        "agent:answer": None, "reflector:propose": None,
        "reflector:missing": "AttributeError: module 'reflector' has no attribute 'missing'"}
    assert len(started) == 1
    said, called = check(["agent:answer", "scorer:reward"], call=("scorer:reward", {"id": "t1", "prompt": "p"}, "out"),
                         cwd=tmp_path, timeout=20)
    assert said == {"agent:answer": None, "scorer:reward": None} and len(started) == 2
    assert called.startswith("reward returned 2.0 for task 't1'; it must be in [0, 1]")
    assert called.endswith("it printed: scorer loaded")  # printed as the ref was imported, before the call


def test_a_ref_whose_import_does_not_end_stops_the_check_there_and_the_rest_say_so(tmp_path):
    _modules(tmp_path, fine="def fn(): pass\n", broken="raise RuntimeError('no database here')\n",
             slow="import time\ntime.sleep(60)\n", quits="import os\nos._exit(3)\n",
             killed="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", after="def fn(): pass\n")
    began = time.monotonic()
    said = check_refs(["fine:fn", "broken:fn", "slow:fn", "after:fn"], cwd=tmp_path, timeout=3)
    assert time.monotonic() - began < 15
    assert said["fine:fn"] is None and said["broken:fn"] == "RuntimeError: no database here"
    assert "took over 3 s" in said["slow:fn"] and "importing it" in said["slow:fn"]
    assert said["after:fn"].startswith(refcheck.NOT_CHECKED) and "'slow:fn'" in said["after:fn"]
    for ref, how in (("quits:fn", "ended with exit code 3"), ("killed:fn", f"killed by signal {int(signal.SIGKILL)}")):
        said = check_refs(["fine:fn", ref, "after:fn"], cwd=tmp_path, timeout=20)
        assert said["fine:fn"] is None and how in said[ref]
        assert said["after:fn"].startswith(refcheck.NOT_CHECKED) and repr(ref) in said["after:fn"]


def test_each_refs_verdict_quotes_what_was_printed_while_it_was_checked(tmp_path):
    _modules(tmp_path, first="print('aaa')\nraise ValueError('first broke')\n",
             second="import sys\nprint('bbb', file=sys.stderr)\nraise ValueError('second broke')\n",
             third="import sys\nsys.stdout.write('ccc')\nvalue = 1\n")
    said = check_refs(["first:fn", "second:fn", "third:value"], cwd=tmp_path, timeout=20)
    assert said["first:fn"] == "ValueError: first broke; it printed: aaa"
    assert said["second:fn"] == "ValueError: second broke; it printed: bbb"
    assert said["third:value"] == "'value' is a value of type int, not a function or a class; it printed: ccc"


def test_a_module_planted_beside_the_users_code_stands_in_for_none_of_the_checks_own(tmp_path):
    """A cloned folder may carry `json.py` or `signal.py`: the check's child imports its own
    modules before the user's folder is on its path, so only what the ref itself imports is theirs."""
    marker = tmp_path / "planted-ran"
    for name in ("json", "signal", "functools", "numbers"):
        _modules(tmp_path, **{name: f"open({str(marker)!r}, 'a').write({name!r})\nraise SystemExit('planted')\n"})
    _modules(tmp_path, scorer="def reward(task, output):\n    return 1.0\n")
    said = check_refs(["scorer:reward"], cwd=tmp_path, timeout=20)
    assert said == {"scorer:reward": None}
    assert not marker.exists()


PLANTED = "open({marker!r}, 'a').write({name!r} + ' ')\nraise ImportError('planted {name} ran')\n"


def test_a_module_planted_in_a_folder_holding_none_of_the_refs_modules_stands_in_for_nothing(tmp_path):
    """The folder went first on the child's path whatever the refs named: a ref to an installed
    module imported the folder's yaml.py, with no code of the folder's named."""
    marker = tmp_path / "planted-ran"
    for name in ("yaml", "httpx", "scipy"):
        _modules(tmp_path, **{name: PLANTED.format(marker=str(marker), name=name)})
    refs = ["agentdescent.testing:route_by_skill", "agentdescent.testing:SkillReflector", "json:loads"]
    assert check_refs(refs, cwd=tmp_path, timeout=20) == dict.fromkeys(refs)
    assert not marker.exists()


def test_a_users_module_named_like_an_installed_one_is_refused_naming_both(tmp_path):
    """It stood in for the installed one in the whole process, for AgentDescent's own imports too."""
    _modules(tmp_path, yaml="def reward(task, output):\n    return 1.0\n", json="def reward(task, output):\n    return 1.0\n")
    said = check_refs(["yaml:reward", "json:reward"], cwd=tmp_path, timeout=20)
    assert said["yaml:reward"].startswith(f"ImportError: rename {tmp_path / 'yaml.py'}, and the reference with it: it is "
                                          "named like the module 'yaml' of ")  # its installed file, where the quote is long enough
    assert said["json:reward"].startswith(f"ImportError: rename {tmp_path / 'json.py'}, and the reference with it: it is "
                                          "named like the module 'json'")


def test_a_users_package_that_a_checkout_elsewhere_holds_too_is_imported_from_the_folder(tmp_path, monkeypatch):
    """A worktree of a project whose main checkout is on the path (installed in development mode):
    the folder's copy is the one the user runs from, here and in the processes that inherit the path."""
    elsewhere, here = tmp_path / "main", tmp_path / "worktree"
    for folder, said in ((elsewhere, "main"), (here, "worktree")):
        (folder / "proj").mkdir(parents=True)
        (folder / "proj" / "__init__.py").write_text(f"WHO = {said!r}\ndef reward(task, output):\n    return 1.0\n")
    monkeypatch.setenv("PYTHONPATH", f"{elsewhere}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert check_refs(["proj:reward"], cwd=here, timeout=20) == {"proj:reward": None}
    out = subprocess.run([sys.executable, "-c", "import sys; from agentdescent.userimport import import_named; "
                          f"print(import_named('proj', {str(here)!r}).WHO)"], capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.strip() == "worktree", out.stderr


def test_a_run_started_in_a_folder_of_planted_modules_runs_none_of_them(service, tmp_path, monkeypatch):
    """Only a python: ref's own module is looked for in the folder a run starts in: the run's
    process imported scipy, httpx and yaml from there, its keys in reach, though no ref named the folder's code."""
    marker = tmp_path / "planted-ran"
    for name in ("yaml", "httpx", "scipy", "numpy", "git"):
        _modules(tmp_path, **{name: PLANTED.format(marker=str(marker), name=name)})
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "my-skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    spec = {"target": str(target), "scorer": "exact", "name": "support-router", "rounds": 2, "n_workers": 2,
            "tasks": {"file": str(REPO / "examples/specs/support-router-tasks.jsonl"), "prompt": "request", "gold": "team"},
            "agent": "python:agentdescent.testing:route_by_skill", "reflector": "python:agentdescent.testing:SkillReflector",
            "prompt": "Use the support-router skill. Which team handles this request?\n\n{task}", "frozen": ["hooks/*"]}
    run_id = service.start(spec).run_id
    assert wait(service, run_id, timeout=180).state == "finished"
    assert not marker.exists()


def test_plan_start_and_show_never_import_the_users_code(service, tmp_path, monkeypatch):
    marker = tmp_path / "imported-by.txt"
    _modules(tmp_path, recorded_refs=RECORDER.format(repo=str(REPO), marker=str(marker)))
    monkeypatch.chdir(tmp_path)  # where the refs import from, as a user's own folder
    refs = "python:recorded_refs:"
    spec = domain.spec(tmp_path, agent=refs + "answer", reflector=refs + "next_rule", scorer=refs + "reward")
    plan = service.plan(spec)
    assert plan.agent == "python:recorded_refs:answer"
    checked_by = marker.read_text(encoding="utf-8").split()
    assert len(checked_by) == 1 and str(os.getpid()) not in checked_by  # one child imports the three refs and tries the scorer
    assert "recorded_refs" not in sys.modules
    run_id = service.start(spec).run_id
    assert wait(service, run_id).state == "finished"
    assert "+rule k0." in service.show(run_id).diff
    assert "recorded_refs" not in sys.modules
    assert str(os.getpid()) not in marker.read_text(encoding="utf-8").split()


def test_a_module_that_prints_leaves_the_mcp_stream_clean(service, tmp_path):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer.\n", encoding="utf-8")
    _modules(tmp_path, noisy="print('noise on stdout')\ndef answer(prompt):\n    return '2026'\n")
    tasks = [{"id": f"q{i}", "prompt": f"question {i}", "gold": "2026"} for i in range(8)]

    async def main() -> None:
        async with mcp.Client(stdio_server(service.store.root.parent, tmp_path, cwd=tmp_path), mode="legacy") as client:
            with anyio.fail_after(60):
                said = await fails(client, "plan", spec={"target": str(prompt), "tasks": tasks, "agent": "python:this:s"})
                assert "agent: cannot load 'this:s'" in said and "is a value of type str" in said
                assert "do more of those" in said  # the end of what `this` printed, in the child
                plan = await call(client, "plan", spec={"target": str(prompt), "tasks": tasks, "agent": "python:noisy:answer"})
                assert plan["agent"] == "python:noisy:answer"
                assert (await call(client, "runs"))["runs"] == []  # every reply parsed: the stream is clean

    anyio.run(main)


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie nobody reaped yet (its parent gone) counts as gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still {what} after {timeout} s"
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=lambda sig: sig.name)
def test_a_check_ends_with_the_command_that_asked_for_it(tmp_path, sig):
    """`plan` ended by a signal while a `python:` agent imports for ever: the child importing it, and
    its scratch folder in the temp folder, go with it rather than live on in a session of their own."""
    marker, scratch = tmp_path / "importing", tmp_path / "tmp"
    scratch.mkdir()
    _modules(tmp_path, hangs=f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
                             "while True:\n    time.sleep(1)\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(domain.spec(tmp_path, agent="python:hangs:agent")), encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "mcp_server")])}
    plan = subprocess.Popen([sys.executable, "-m", "agentdescent", "plan", str(spec)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        _until(lambda: marker.exists() and marker.read_text(), "waiting for the check to import the agent")
        child = int(marker.read_text())
        assert [p.name for p in scratch.iterdir() if p.name.startswith("agentdescent-refcheck-")]
        plan.send_signal(sig)
        assert plan.wait(timeout=60) == -sig
        _until(lambda: not _alive(child), "running, the check of a command that ended")
        _until(lambda: not any(scratch.glob("agentdescent-refcheck-*")), "there, the check's scratch folder")
    finally:
        plan.kill()
        plan.wait()
        if child is not None and _alive(child):  # the test failed: what it started goes all the same
            os.killpg(child, signal.SIGKILL)
