"""The run verbs of the `agentdescent` command, run as real subprocesses on a store of the test's
own: plan, evolve, watch, status, show, accept, reject, cancel, resume, runs, doctor."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import frozen_edit
from tests import keyword_domain as domain
from tests.loopback import LoopbackServer, Response
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
LEAD = "Answer with the code.\n"
STARTED = re.compile(r"^started run (\S+) in its own process", re.MULTILINE)


def agentdescent(*args: str, env: dict[str, str] | None = None, columns: int = 120,
                 program: list[str] | None = None) -> subprocess.CompletedProcess:
    """The command, from the repository root (the specs' python: refs import from there)."""
    return subprocess.run([*(program or [sys.executable, "-m", "agentdescent"]), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": str(columns), "TMPDIR": tempfile.gettempdir(),
                               "AGENTDESCENT_HOME": os.environ["AGENTDESCENT_HOME"], **(env or {})})


def spec_file(folder: Path, **fields) -> str:
    path = folder / "spec.json"
    path.write_text(json.dumps(domain.spec(folder, **fields)), encoding="utf-8")
    return str(path)


def evolve(spec: str, *flags: str, env: dict[str, str] | None = None) -> str:
    done = agentdescent("evolve", spec, *flags, env=env)
    assert done.returncode == 0, done.stderr
    return STARTED.search(done.stdout).group(1)


def test_plan_prints_the_quote_and_starts_nothing(service, tmp_path):
    spec = spec_file(tmp_path, price_per_call=0.01, max_calls=500)
    done = agentdescent("plan", spec)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"plan for {tmp_path / 'prompt.md'} (text); nothing has started" in out
    assert "tasks: 24 (" in out and "agent: python:tests.keyword_domain:answer" in out
    assert re.search(r"calls: \d+-\d+, capped at 500 by max_calls", out) and "cost: $" in out and "basis: " in out
    assert f"next: if that suits, agentdescent evolve {spec} starts it" in out
    plan = json.loads(agentdescent("plan", spec, "--json").stdout)
    assert plan["quote"]["calls_high"] <= 500 and plan["train"] + plan["held_out"] == 24
    assert service.runs() == []
    priced = spec_file(tmp_path, price_per_1k_tokens=0.5)  # money said alike by plan and by its --json's next
    money = re.search(r"cost: (\$[\d,]+\.\d\d-\$[\d,]+\.\d\d)\n", agentdescent("plan", priced).stdout).group(1)
    assert f"calls, {money}: " in json.loads(agentdescent("plan", priced, "--json").stdout)["next"]


def test_plan_finds_python_refs_from_the_installed_script(service, tmp_path):
    script = Path(sys.executable).with_name("agentdescent")
    if not script.exists():
        pytest.skip("the agentdescent script is not installed beside this Python")
    done = agentdescent("plan", spec_file(tmp_path), program=[str(script)])
    assert done.returncode == 0, done.stderr


def test_plan_check_models_asks_each_model_server_for_its_list(service, tmp_path):
    served = Response(body={"data": [{"id": "gpt-test"}]})
    with LoopbackServer(lambda request: served) as server:
        agent = {"kind": "openai", "model": "gpt-tset", "options": {"base_url": server.url + "/v1", "api_key_env": "MY_KEY"}}
        done = agentdescent("plan", spec_file(tmp_path, agent=agent), "--check-models", env={"MY_KEY": "k"})
    assert done.returncode == 2 and "agent: openai:gpt-tset: 'gpt-tset' is not among the 1 models" in done.stderr, done.stderr
    assert [(r.method, r.path) for r in server.requests] == [("GET", "/v1/models")]  # nothing without the flag: test_plan_models


def test_evolve_watch_status_show_and_accept_the_walkthrough(service, tmp_path):
    run = evolve(spec_file(tmp_path))
    watched = agentdescent("watch")
    assert watched.returncode == 0, watched.stderr
    assert f"run {run} (the latest; give RUN for another)" in watched.stdout
    assert f"evolving: at most {4 * domain.RULES} rounds" in watched.stdout  # not a terminal: a line a round, no bar
    assert re.search(rf"^round 1 of {4 * domain.RULES} done: \d+ calls$", watched.stdout, re.M) and "━" not in watched.stdout
    assert f"run {run} (finished): finished" in watched.stdout and f"agentdescent accept {run}" in watched.stdout

    status = agentdescent("status", run)
    assert status.returncode == 0 and f"run {run} (finished)" in status.stdout and "round " in status.stdout
    assert f"committed {domain.RULES}" in status.stdout
    assert json.loads(agentdescent("status", run, "--json").stdout)["state"] == "finished"

    shown = agentdescent("show", run)
    assert shown.returncode == 0, shown.stderr
    assert "+rule k0." in shown.stdout and "--- a/prompt.md" in shown.stdout and "held-out reward: 0.000 -> 1.000" in shown.stdout
    assert f"committed diffs ({domain.RULES}):" in shown.stdout
    assert re.search(r"evidence \(the rollouts it came from\): task t\d+ reward 0\.00", shown.stdout)
    page = service.store.get(run).file("report.html")
    assert f"report: agentdescent report {run} writes {page}" in shown.stdout
    assert "+rule k0." in json.loads(agentdescent("show", run, "--json").stdout)["diff"]
    latest = agentdescent("show")  # `agentdescent show > change.txt`: which run it is goes to stderr, not the file
    assert f"run {run} (the latest" in latest.stderr and "(the latest" not in latest.stdout
    printed = shown.stdout[shown.stdout.index("diff --git"):shown.stdout.index(f"committed diffs ({domain.RULES}):")]
    (tmp_path / "printed.patch").write_text(printed, encoding="utf-8")  # piped, the diff is printed as it is
    applies = subprocess.run(["git", "apply", "--check", "printed.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert applies.returncode == 0, applies.stderr

    dry = agentdescent("accept", run, "--dry-run")
    assert dry.returncode == 0 and "would write: prompt.md" in dry.stdout
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == LEAD  # nothing written
    accepted = agentdescent("accept", run)
    assert accepted.returncode == 0, accepted.stderr
    assert all(f"rule k{i}." in (tmp_path / "prompt.md").read_text(encoding="utf-8") for i in range(domain.RULES))
    backup = re.search(r"^  backup: (.+)$", accepted.stdout, re.MULTILINE).group(1)
    assert Path(backup).exists() and f"agentdescent restore {tmp_path / 'prompt.md'}" in accepted.stdout
    assert service.status(run).state == "accepted"


@pytest.mark.parametrize("usage", [True, False])
def test_status_and_the_report_say_how_many_of_the_tokens_were_estimated(service, tmp_path, usage):
    """A server that sends no usage has its tokens estimated: status showed the estimate as a count."""
    def answer(request):  # as the agent, and as the reflector
        prompt = request.json["messages"][-1]["content"]
        text = domain.next_rule(prompt) if "<instructions>" in prompt else domain.answer(prompt)
        body = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
        return Response(body={**body, "usage": {"prompt_tokens": 50, "completion_tokens": 1}} if usage else body)

    with LoopbackServer(answer) as server:
        agent = {"kind": "openai", "model": "m", "options": {"base_url": server.url + "/v1", "api_key_env": None}}
        run = service.start(domain.spec(tmp_path, agent=agent, reflector=agent, rounds=1)).run_id
        done = wait(service, run, timeout=120)
    assert done.state == "finished" and done.tokens > 0, done
    estimated = 0 if usage else done.tokens
    assert done.estimated_tokens == estimated == json.loads(agentdescent("status", run, "--json").stdout)["estimated_tokens"]
    said = f"{done.tokens} tokens ({done.tokens} of them estimated)"
    assert (said in agentdescent("status", run).stdout) is not usage
    assert agentdescent("report", run).returncode == 0
    assert (said in service.store.get(run).file("report.html").read_text(encoding="utf-8")) is not usage


def test_a_second_accept_of_an_l1_change_never_approves_the_next_one(service, tmp_path):
    """The user reviews a change in show and accepts it; the run posts the next within a second, and
    the same accept again (a retry, a double submit) is refused, naming the change pending now."""
    from tests import l1_domain

    spec = tmp_path / "two.json"
    spec.write_text(json.dumps(l1_domain.two_scripts(tmp_path)), encoding="utf-8")
    run = evolve(str(spec))
    wait(service, run, until=lambda s: bool(s.waiting_on) or s.state not in ("starting", "running"))
    shown = agentdescent("show", run)
    first = re.search(r"^L1 change (\w+) waits for your approval \(scripts/a\.sh\)", shown.stdout, re.M).group(1)
    assert f"agentdescent accept {run} --change {first} approves it" in shown.stdout
    assert f"waiting on your approval of L1 change {first}" in agentdescent("status", run).stdout
    unnamed = agentdescent("accept", run)
    assert unnamed.returncode == 2 and f"agentdescent accept {run} --change {first}" in unnamed.stderr
    assert agentdescent("accept", run, "--change", first).returncode == 0
    wait(service, run, until=lambda s: bool(s.waiting_on) and first not in s.waiting_on or s.state not in
         ("starting", "running"))
    again = agentdescent("accept", run, "--change", first)
    second = service.show(run).pending_approval
    assert again.returncode == 2 and second.keys == ["scripts/b.sh"], again
    assert f"no L1 change {first} waits" in again.stderr
    assert f"the pending one now is L1 change {second.change} (to scripts/b.sh)" in again.stderr
    assert f"agentdescent show {run} shows it; then agentdescent accept {run} --change {second.change}" in again.stderr
    assert agentdescent("cancel", run).returncode == 0
    assert "curl" not in service.show(run).diff


def test_an_edit_of_yours_the_run_also_made_elsewhere_is_refused_with_both_ways_out(service, tmp_path):
    """You rewrote the prompt's first line while the run appended rules after it: git cannot join
    the two, so accept writes nothing, and every message names the two ways on: merge by hand,
    or overwrite knowingly, your version kept in the backup."""
    target = tmp_path / "prompt.md"
    run = evolve(spec_file(tmp_path))
    wait(service, run)
    target.write_text("Answer with the code, and nothing else.\n", encoding="utf-8")

    dry = agentdescent("accept", run, "--dry-run")
    assert dry.returncode == 0 and "changed on disk and by the run, cannot merge: prompt.md" in dry.stdout
    assert (f"next: merge prompt.md by hand (the run's change: agentdescent show {run}) and accept again, or "
            f"agentdescent accept --overwrite {run} writes the run's version there") in " ".join(dry.stdout.split())
    refused = agentdescent("accept", run)
    assert refused.returncode == 2 and "the backup taken first keeps yours" in " ".join(refused.stderr.split())
    assert target.read_text(encoding="utf-8") == "Answer with the code, and nothing else.\n"

    forced = agentdescent("accept", "--overwrite", run)
    assert forced.returncode == 0, forced.stderr
    backup = Path(re.search(r"^  backup: (.+)$", forced.stdout, re.MULTILINE).group(1))
    assert backup.read_text(encoding="utf-8") == "Answer with the code, and nothing else.\n"
    assert "rule k0." in target.read_text(encoding="utf-8")


def accepted_run(service, tmp_path: Path) -> tuple[Path, str, str]:
    """A run on `tmp_path`'s prompt.md, finished and accepted: (the target, the run, what it wrote)."""
    target = tmp_path / "prompt.md"
    run = evolve(spec_file(tmp_path))
    wait(service, run)
    assert agentdescent("accept", run).returncode == 0
    return target, run, target.read_text(encoding="utf-8")


def test_restore_undoes_an_accept_and_a_second_restore_undoes_the_restore(service, tmp_path):
    target, run, evolved = accepted_run(service, tmp_path)

    undone = agentdescent("restore", str(target))
    assert undone.returncode == 0, undone.stderr
    assert target.read_text(encoding="utf-8") == LEAD
    assert f"restored {target} from {tmp_path / '.prompt.md.bak-1' / 'prompt.md'}" in undone.stdout
    assert f"run {run} is now restored" in undone.stdout and f"next: agentdescent restore {target} undoes" in undone.stdout
    status = agentdescent("status", run)
    assert f"run {run} (restored): {target} no longer holds this run's version (a restore put" in status.stdout
    assert f"next: agentdescent restore {target} puts the run's version back" in status.stdout
    assert agentdescent("report", run).returncode == 0
    assert "restored: " in service.store.get(run).file("report.html").read_text(encoding="utf-8")  # state: message

    redone = agentdescent("restore", str(target))  # the restore backed the evolved version up: this puts it back
    assert redone.returncode == 0, redone.stderr
    assert target.read_text(encoding="utf-8") == evolved and f"run {run} is now accepted" in redone.stdout
    assert service.status(run).state == "accepted"
    oldest = agentdescent("restore", str(target), "--backup", "1")
    assert oldest.returncode == 0 and target.read_text(encoding="utf-8") == LEAD
    assert "backups 1, 2, 3, 4 in " in oldest.stdout
    missing = agentdescent("restore", str(target), "--backup", "9")
    assert missing.returncode == 2 and "no backup number 9" in missing.stderr and "1, 2, 3, 4 " in missing.stderr
    assert "restore" in agentdescent("restore", "--help").stdout and "undoes the restore" in " ".join(
        agentdescent("restore", "--help").stdout.split())


def test_a_restore_by_any_path_or_of_a_deleted_target_follows_the_run_and_accept_writes_it_again(service, tmp_path):
    target, run, evolved = accepted_run(service, tmp_path)
    undone = agentdescent("restore", os.path.relpath(target, ROOT))  # ../../tmp/...: the same target
    assert undone.returncode == 0 and f"restored {target} from" in undone.stdout and service.status(run).state == "restored"
    assert agentdescent("accept", run).returncode == 0 and target.read_text(encoding="utf-8") == evolved

    target.unlink()  # the evolved file deleted by hand, then the original asked back
    back = agentdescent("restore", str(target))
    assert back.returncode == 0 and target.read_text(encoding="utf-8") == LEAD, back.stderr
    status = service.status(run)
    assert status.state == "restored" and status.next == f"agentdescent accept {run} writes the run's version again"
    assert agentdescent("accept", run).returncode == 0 and target.read_text(encoding="utf-8") == evolved


def test_show_names_a_playbook_s_rules_by_their_text_and_an_invalid_diff_by_its_reason(service, tmp_path):
    (tmp_path / "rules").mkdir()
    rules = evolve(spec_file(tmp_path / "rules", strategy="append"))
    refusing = tmp_path / "refusing"  # its reflector only ever edits a frozen file
    refusing.mkdir()
    (refusing / "spec.json").write_text(json.dumps(frozen_edit.spec(refusing)), encoding="utf-8")
    invalid = evolve(str(refusing / "spec.json"))
    wait(service, rules)
    wait(service, invalid)
    shown = agentdescent("show", rules).stdout
    assert re.search(r"\(committed\): adds «rule k0\.»", shown) and "rule-" not in shown, shown
    refused = agentdescent("show", invalid).stdout
    assert re.search(r"\(invalid\): the proposal is unusable: touches frozen \(L0\) key\(s\) hooks/pre\.sh", refused), refused


def test_a_bad_spec_exits_2_with_every_problem_by_field(service, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"target": "x", "tasks": [], "agent": "gpt-4", "n_workers": 0, "rouds": 3}), encoding="utf-8")
    for verb in ("plan", "evolve"):
        done = agentdescent(verb, str(bad))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert all(f"  {field}: " in done.stderr for field in ("agent.kind", "n_workers", "rouds")), done.stderr
    as_json = agentdescent("plan", str(bad), "--json")  # a script reads the problems from stdout, by field
    assert as_json.returncode == 2 and {"agent.kind", "n_workers", "rouds"} <= {
        p["field"] for p in json.loads(as_json.stdout)["problems"]}
    wrong = agentdescent("plan", str(tmp_path / "spec.txt"))
    assert wrong.returncode == 2 and "is not a run spec (a .yaml, .yml or .json file)" in wrong.stderr
    assert "write a spec first: agentdescent init " in wrong.stderr
    assert service.runs() == []


def test_a_run_id_that_is_not_known_exits_2_and_lists_the_known_ones(service, tmp_path):
    nothing = agentdescent("show")
    assert nothing.returncode == 2 and "agentdescent evolve SPEC" in nothing.stderr
    run = evolve(spec_file(tmp_path))
    for verb in ("status", "show", "watch", "accept", "cancel"):
        done = agentdescent(verb, "no-such-run")
        assert done.returncode == 2 and run in done.stderr and "Traceback" not in done.stderr
    assert agentdescent("status", run[:-2]).returncode == 0  # the first letters are enough
    wait(service, run)


def test_a_slowed_run_is_cancelled_then_resumed_to_its_end(service, tmp_path):
    run = evolve(spec_file(tmp_path), env={"KEYWORD_DELAY": "0.2"})
    wait(service, run, until=lambda s: s.state == "running")
    cancelled = agentdescent("cancel", run)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"run {run} (cancelled)" in cancelled.stdout and f"next: agentdescent resume {run}" in cancelled.stdout
    assert agentdescent("watch", run).returncode == 1  # it did not get to its end
    again = agentdescent("cancel", run)
    assert again.returncode == 2 and "nothing to cancel" in again.stderr

    resumed = agentdescent("resume", run, "--watch")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed run {run}" in resumed.stdout and f"run {run} (finished)" in resumed.stdout
    done = service.status(run)
    assert done.state == "finished" and done.best_reward == 1.0
    rejected = agentdescent("reject", run)
    assert rejected.returncode == 0 and "was not touched" in rejected.stdout
    assert f"next: agentdescent accept {run} still writes it back if you change your mind" in rejected.stdout
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == LEAD
    resumed = agentdescent("resume", run)
    assert resumed.returncode == 2 and f"agentdescent accept {run} still writes it back" in resumed.stderr
    accepted = agentdescent("accept", run)  # the user changed their mind: what the advice said works
    assert accepted.returncode == 0, accepted.stderr
    assert "rule k0." in (tmp_path / "prompt.md").read_text(encoding="utf-8") and service.status(run).state == "accepted"


def test_runs_lists_the_runs_and_prune_removes_only_old_temporary_ledgers(service, tmp_path):
    run = evolve(spec_file(tmp_path))
    wait(service, run)
    listed = agentdescent("runs")
    assert listed.returncode == 0 and re.search(rf"^{run}\s+finished\s+\S+prompt\.md\s+\d+/{4 * domain.RULES}\s+0\.000 -> 1\.000",
                                                listed.stdout, re.MULTILINE), listed.stdout
    assert [r["id"] for r in json.loads(agentdescent("runs", "--json").stdout)] == [run]

    temp = tmp_path / "tmp"
    old, fresh = old_ledger(temp / "agentdescent-ledger-old"), temp / "agentdescent-ledger-fresh"
    fresh.mkdir()
    not_a_ledger, other = temp / "agentdescent-ledger-notes", temp / "keep-me"
    for folder in (not_a_ledger, other):
        folder.mkdir()
        os.utime(folder, (time.time() - 3600,) * 2)
    stopped, live, new = (temp / f"agentdescent-rollouts-{name}-abcd1234" for name in ("stopped-1", "live-2", "new-3"))
    for folder in (stopped, live, new):
        (folder / "agentdescent-ws-x").mkdir(parents=True)
        os.utime(folder, (time.time() - (0 if folder is new else 3600),) * 2)
    left, checking = temp / "agentdescent-refcheck-k1ll3d", temp / "agentdescent-merge-now"
    for folder in (left, checking):
        (folder / "m.py").parent.mkdir(parents=True)
        (folder / "m.py").write_text("x = 1\n", encoding="utf-8")
    for path in (left / "m.py", left):
        os.utime(path, (time.time() - 3600,) * 2)  # a killed plan's check of its refs
    held = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_SH)  # as a live run's process holds its rollout folder
    try:
        pruned = agentdescent("runs", "--prune", env={"TMPDIR": str(temp)})
    finally:
        os.close(held)
    assert pruned.returncode == 0, pruned.stderr
    assert "removed 1 temporary ledger older than 10 minutes" in pruned.stdout and "freeing 4." in pruned.stdout
    assert "left 1 folder named like one that another user owns or that is not a ledger" in pruned.stdout
    assert not old.exists() and fresh.exists() and not_a_ledger.exists() and other.exists()
    assert "removed 2 rollout folders that stopped runs left there; kept 1 that a live run's process holds" in pruned.stdout
    assert not stopped.exists() and live.exists() and not new.exists()  # unlocked however new: a run locks its own as it makes it
    assert "removed 1 scratch folder killed commands left there" in pruned.stdout
    assert not left.exists() and checking.exists()
    assert [r.id for r in service.runs()] == [run]  # the run store is not touched


def old_ledger(path: Path) -> Path:
    """A ledger as a run without a store leaves it (a bare git repository), untouched for an hour."""
    subprocess.run(["git", "init", "--bare", "--quiet", "--template=", str(path)], check=True, timeout=30)
    (path / "objects" / "blob").write_bytes(b"x" * 4096)
    for here, dirs, files in os.walk(path):
        for name in [*dirs, *files, "."]:
            os.utime(os.path.join(here, name), (time.time() - 3600,) * 2)
    return path


def test_prune_leaves_the_ledgers_of_other_users_alone(service, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user takes root")
    temp = tmp_path / "tmp"
    theirs = old_ledger(temp / "agentdescent-ledger-theirs")
    for here, dirs, files in os.walk(theirs):
        for name in [*dirs, *files, "."]:
            os.lchown(os.path.join(here, name), 65534, 65534)
    pruned = agentdescent("runs", "--prune", env={"TMPDIR": str(temp)})
    assert pruned.returncode == 0 and "removed 0 temporary ledgers" in pruned.stdout, pruned.stdout + pruned.stderr
    assert "left 1 folder named like one that another user owns" in pruned.stdout and (theirs / "HEAD").is_file()


@pytest.mark.parametrize("script, mode, said", [
    ("#!/bin/sh\nprintf '\\377\\376 garbage out'\n", 0o755, "claude: found, version unknown"),
    ("#!/bin/sh\necho hi\n", 0o644, "/claude is on PATH but not executable: chmod +x it, or reinstall it"),
    ("#!/nonexistent/interp\necho hi\n", 0o755,
     "/claude cannot start: the interpreter its first line names is not there ('#!/nonexistent/interp')"),
])
def test_doctor_and_plan_say_what_is_wrong_with_a_broken_agent_cli(service, tmp_path, script, mode, said):
    """A claude that is not executable read as 'not on PATH', one whose interpreter is gone as
    'version unknown' (and plan passed it), and one printing garbage had it shown as its version."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "claude").write_text(script, encoding="utf-8")
    (tmp_path / "bin" / "claude").chmod(mode)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    assert said in agentdescent("doctor", env=env).stdout
    planned = agentdescent("plan", spec_file(tmp_path, agent="claude_code"), env=env)
    if mode == 0o755 and "garbage" in script:
        assert planned.returncode == 0, planned.stderr
    else:
        assert planned.returncode == 2 and said in planned.stderr, planned.stderr


def test_plan_warns_of_an_agent_cli_too_old_to_keep_its_sessions_out_of_the_home(service, tmp_path):
    """Told no flag it does not know, such a CLI saves every call's session under the user's home."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "claude").write_text("#!/bin/sh\necho '0.2.9 (Claude Code)'\n", encoding="utf-8")
    (tmp_path / "bin" / "claude").chmod(0o755)
    planned = agentdescent("plan", spec_file(tmp_path, agent="claude_code"), env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert planned.returncode == 0, planned.stderr
    assert "does not list --no-session-persistence in its help (an older version?)" in " ".join(planned.stdout.split())


def test_doctor_names_git_and_exits_0_when_the_demo_can_run(service):
    done = agentdescent("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "git: found" in done.stdout and "run store: " in done.stdout and "claude-code: " in done.stdout
    report = json.loads(agentdescent("doctor", "--json").stdout)
    assert report["demo_ok"] and report["git"]["found"]


def test_every_verb_has_an_example_in_its_help(service, capsys):
    from agentdescent.cli.main import main

    for verb in ("plan", "evolve", "status", "watch", "show", "report", "accept", "reject", "cancel", "resume", "runs",
                 "doctor", "mcp"):
        with pytest.raises(SystemExit) as done:  # argparse exits after printing the help
            main([verb, "--help"])
        assert done.value.code == 0 and "example:\n  " in capsys.readouterr().out, verb


def test_an_empty_run_is_refused_not_taken_for_the_latest(service, tmp_path):
    evolve(spec_file(tmp_path))
    for verb in ("watch", "accept", "cancel"):
        done = agentdescent(verb, "")  # `agentdescent accept "$RUN"` with RUN not set
        assert done.returncode == 2 and "RUN is empty (a shell variable that is not set?)" in done.stderr, done
    assert [run.state for run in service.runs()] != ["accepted"]
