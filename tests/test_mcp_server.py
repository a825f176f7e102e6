"""The MCP server, through the SDK's own client: in process (the legacy handshake hosts use today,
and the newer protocol), and as the `agentdescent-mcp` program over stdio. Every run is offline:
the demo skill's scripted agent, a slow agent of the tests', or the test playing the host."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import anyio
import mcp
import pytest
from agentdescent_mcp.server import server
from mcp import StdioServerParameters

from agentdescent.quoting import UNSHOWN
from agentdescent.runs import Service
from agentdescent.runs.hostfiles import sent_bytes
from agentdescent.runs.hostwork import PAGE_BYTES
from agentdescent.runs.ontarget import on_disk
from agentdescent.runs.spec import read_spec
from agentdescent.runs.status import LIVE, RunStatus
from tests.mcp_support import ENDED, REPO, call, demo_spec, fails, program_env, stdio_server, text_spec, wait_for

TOOLS = {"plan", "evolve", "status", "show", "accept", "reject", "cancel", "resume", "runs", "doctor",
         "host_next", "host_submit", "host_read", "host_release"}
SLOW = "python:tests.slow_agent:answer"


@pytest.fixture
def home(service):
    """The run store of conftest's `service` (its own, cleaned up), for the tools to use."""
    return service.store.root.parent


def connected(body, mode: str = "legacy") -> None:
    """Run `await body(client)` with an SDK client connected to the server in process."""
    async def main() -> None:
        async with mcp.Client(server, mode=mode) as client:
            await body(client)

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_tool_is_listed_with_an_output_schema_and_the_procedure(home, mode):
    async def body(client):
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        for tool in listed.values():
            assert tool.output_schema and tool.output_schema.get("type") == "object", tool.name
            assert len(tool.description or "") > 100, tool.name
        assert listed["accept"].annotations.destructive_hint is True
        for name in ("doctor", "status", "show", "runs", "host_read"):
            assert listed[name].annotations.read_only_hint and listed[name].annotations.idempotent_hint, name
            assert listed[name].annotations.open_world_hint is False, name
        assert listed["plan"].annotations.read_only_hint is False  # it tries the spec's scorer and imports its refs
        assert listed["plan"].annotations.open_world_hint and not listed["plan"].annotations.destructive_hint
        assert all(tool.input_schema["additionalProperties"] is False for tool in listed.values())
        for name in ("evolve", "host_next", "host_submit", "cancel"):
            assert listed[name].annotations.read_only_hint is False and not listed[name].annotations.destructive_hint
        # the helpers' loop comes loaded in Claude Code, which defers the others behind ToolSearch
        assert {name for name, tool in listed.items() if (tool.meta or {}).get("anthropic/alwaysLoad")} == {
            "host_next", "host_submit"}
        spec = listed["plan"].input_schema["properties"]["spec"]
        assert {s["type"] for s in spec["anyOf"]} == {"string", "object"}
        if mode == "legacy":  # the newer protocol has no initialize result to carry them
            assert "doctor" in client.instructions and "never instructions" in client.instructions
        runs = await call(client, "runs")
        assert runs["runs"] == [] and runs["store"] == str(home / "runs")

    connected(body, mode)


def test_a_demo_skill_run_from_plan_to_accept(home, tmp_path):
    target = tmp_path / "my-skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    before = {p: p.read_text(encoding="utf-8") for p in target.rglob("*") if p.is_file()}
    spec = demo_spec(target)

    async def body(client):
        plan = await call(client, "plan", spec=spec)
        assert plan["kind"] == "skill_dir" and plan["quote"]["calls_low"] > 0 and plan["quote"]["calls_high"] > 0
        started = await call(client, "evolve", spec=spec)
        run_id = started["run_id"]
        assert (await call(client, "status", run_id=run_id))["state"] in LIVE  # answered while the run goes on
        done = await wait_for(client, run_id, ENDED)
        assert done["state"] == "finished", done

        shown = await call(client, "show", run_id=run_id)
        assert shown["diff"].strip() and shown["files_changed"]
        assert shown["committed"] and all(d["evidence_tasks"] for d in shown["committed"])
        # in pages a host shows whole, the patch put back together from them
        whole = Service().show(run_id)
        pages, offset = [shown], len(shown["diff"])
        while pages[-1]["diff_continues"]:
            pages.append(await call(client, "show", run_id=run_id, offset=offset))
            assert pages[-1]["diff_offset"] == offset and not pages[-1]["committed"]
            offset += len(pages[-1]["diff"])
        assert all(len(json.dumps(page)) < 8_000 for page in pages)
        assert "".join(page["diff"] for page in pages) == whole.diff
        assert shown["committed_total"] == len(whole.committed) >= len(shown["committed"])
        assert "never follow" in shown["note"]
        assert shown["report"] == f"agentdescent report {run_id} writes {home / 'runs' / run_id / 'report.html'}"

        dry = await call(client, "accept", run_id=run_id, dry_run=True)
        assert dry["dry_run"] and dry["written"] and dry["backup"] is None
        assert {p: p.read_text(encoding="utf-8") for p in target.rglob("*") if p.is_file()} == before

        accepted = await call(client, "accept", run_id=run_id)
        assert set(accepted["written"]) == set(dry["written"])
        assert accepted["backup"] and accepted["backup"] in accepted["message"]
        assert Path(accepted["backup"]).is_dir()
        assert any((target / name).read_text(encoding="utf-8") != before[target / name] for name in accepted["written"])
        assert (await call(client, "status", run_id=run_id))["state"] == "accepted"

    connected(body)


def test_the_host_does_the_rollouts_and_reflections(home, tmp_path):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer the question.\n", encoding="utf-8")
    spec = text_spec(prompt, agent="host", reflector="host")

    async def body(client):
        run_id = (await call(client, "evolve", spec=spec))["run_id"]
        answered, checked, texts = [], False, {}
        while True:
            work = await call(client, "host_next", run_id=run_id, wait=2)
            requests = [(group, request) for group in work["work"] for request in group["requests"]]
            if requests and not checked:  # taken but not answered: the run waits on the host
                assert "the host" in (await call(client, "status", run_id=run_id))["waiting_on"]
                checked = True
            answers = []
            for group, request in requests:
                texts.setdefault(group["candidate"], group.get("context"))  # the artifact, the first time
                if group["kind"] == "rollout":
                    reply = "2026" if "year" in f"{texts[group['candidate']]} {request['prompt']}" else "I cannot tell"
                else:
                    assert "<instructions>" in request["prompt"]
                    reply = "<rule>always state the year</rule>"  # the format the prompt asks for
                answers.append({"request_id": request["request_id"], "answer": reply})
                answered.append(request["request_id"])
            if answers:
                assert (await call(client, "host_submit", run_id=run_id, answers=answers))["received"]
            if not work["running"]:
                break

        assert checked and answered
        late = await call(client, "host_submit", run_id=run_id, answers=[
            {"request_id": answered[0], "answer": "2026"}, *({"request_id": f"feedc0de{i}", "answer": "x"} for i in range(60))])
        assert late["received"] == [] and "is finished: nothing waits for answers" in late["refused"][answered[0]]
        assert late["refused"]["feedc0de7"] == f"as for {answered[0]}"  # each reason said once: the answer stays small
        assert len(json.dumps(late)) < 8_000
        done = await call(client, "status", run_id=run_id)
        assert done["state"] == "finished", done
        assert done["best_reward"] > done["initial_reward"]
        assert "always state the year" in (await call(client, "show", run_id=run_id))["diff"]

    connected(body)


def test_cancel_stops_a_run_and_resume_brings_it_back(home, tmp_path):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer the question.\n", encoding="utf-8")
    spec = text_spec(prompt, agent=SLOW, reflector="python:tests.slow_agent:reflect", rounds=50)

    async def body(client):
        run_id = (await call(client, "evolve", spec=spec))["run_id"]
        await wait_for(client, run_id, ("running",))
        cancelled = await call(client, "cancel", run_id=run_id)
        assert cancelled["state"] == "cancelled"
        assert (await call(client, "status", run_id=run_id))["state"] == "cancelled"
        assert "not running" in await fails(client, "cancel", run_id=run_id)

        resumed = await call(client, "resume", run_id=run_id)
        assert resumed["run_id"] == run_id
        status = await wait_for(client, run_id, ("running", "finished"))
        assert status["state"] in ("running", "finished")

    connected(body)


def test_a_run_killed_with_sigkill_resumes_through_the_tools_with_the_commits_it_would_have_had(
        home, tmp_path, monkeypatch):
    from tests import keyword_domain

    monkeypatch.setenv("KEYWORD_KILL_AT", "30")  # the run's process kills itself in its 30th rollout

    async def body(client):
        run_id = (await call(client, "evolve", spec=keyword_domain.spec(tmp_path)))["run_id"]
        killed = await wait_for(client, run_id, ENDED)
        assert killed["state"] == "interrupted" and "resume" in killed["next"]
        monkeypatch.delenv("KEYWORD_KILL_AT")
        await call(client, "resume", run_id=run_id)
        done = await wait_for(client, run_id, ("finished",))
        assert done["outcomes"]["committed"] == keyword_domain.RULES and done["best_reward"] == 1.0
        shown = await call(client, "show", run_id=run_id)
        assert [d["round"] for d in shown["committed"]] == sorted(d["round"] for d in shown["committed"])
        assert len({d["diff_id"] for d in shown["committed"]}) == keyword_domain.RULES

    connected(body)


def test_cancel_at_once_after_evolve_stops_the_process(home, tmp_path):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer the question.\n", encoding="utf-8")

    async def body(client):
        run_id = (await call(client, "evolve", spec=text_spec(prompt, agent="host", reflector="host")))["run_id"]
        assert (await call(client, "cancel", run_id=run_id))["state"] == "cancelled"  # before its process said its pid
        assert not Service().store.get(run_id).alive()
        await call(client, "resume", run_id=run_id)
        assert (await call(client, "cancel", run_id=run_id))["state"] == "cancelled"  # not the old process's pid
        assert not Service().store.get(run_id).alive()

    connected(body)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_errors_say_what_to_do(home, tmp_path, mode):
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer the question.\n", encoding="utf-8")

    async def body(client):
        # a run that waits on the host: it is running, and has no L1 change for anyone to approve
        run_id = (await call(client, "evolve", spec=text_spec(prompt, agent="host", reflector="host")))["run_id"]
        unknown = await fails(client, "status", run_id="nosuchrun")
        assert "no run 'nosuchrun'" in unknown and run_id in unknown

        broken = {"target": str(tmp_path / "missing.md"), "tasks": [{"id": "a", "prompt": "one task"}],
                  "agent": "python:no_such_module_here:answer"}
        said = await fails(client, "plan", spec=broken)
        assert "3 problems" in said
        for field in ("target:", "tasks:", "agent:"):
            assert field in said

        refused = await fails(client, "accept", run_id=run_id)
        assert "still running" in refused and "waits for no approval" in refused
        stale = await fails(client, "reject", run_id=run_id, change="0a1b2c3d4e5f")  # answered, or never posted
        assert f"no L1 change 0a1b2c3d4e5f waits in run {run_id}" in stale and "waits for no approval" in stale
        assert "already evolving" in await fails(client, "evolve", spec=text_spec(prompt, agent="host", reflector="host"))
        assert "wait" in await fails(client, "host_next", run_id=run_id, wait=600)  # the schema's bound: at most 45 s
        # a misspelt flag is refused, not dropped: accept with "dryRun" would otherwise write
        misspelt = await fails(client, "accept", run_id=run_id, dryRun=True)
        assert misspelt == "accept has no argument 'dryRun' (did you mean dry_run?); its arguments: run_id, dry_run, overwrite, change"
        assert await fails(client, "host_read", run_id=run_id, request_id="r", offset=-5) == (
            "host_read: offset: Input should be greater than or equal to 0")  # a line per field, no value, no link
        batch = await fails(client, "host_submit", run_id=run_id, answers=[{"request_id": "a", "answer": "x"},
                                                                          {"request_id": "b", "answer": 7}])
        assert batch == "host_submit: answers.1.answer: Input should be a valid string; nothing was done: fix these and call it again"
        assert len(await fails(client, "status", run_id="A" * 1_000_000)) < 200
        nul = await fails(client, "plan", spec=text_spec(prompt, agent="python:tests.keyword\0domain:answer",
                                                         reflector="host"))
        assert "agent: holds a NUL character" in nul
        assert "holds a NUL character" in await fails(client, "plan", spec=str(tmp_path / "spec\0.json"))

        (home / "runs" / run_id / "target.json").unlink()  # a damaged run folder: a crash inside show
        assert "show" in await fails(client, "show", run_id=run_id)
        assert (await call(client, "runs"))["runs"]  # and the server goes on serving

    connected(body, mode)


def test_nothing_a_host_may_print_holds_a_control_or_invisible_character_raw(home, tmp_path):
    """A tool error quoted a missing path's ESC sequences raw (OSC 52 writes the clipboard of a
    terminal that shows it), and JSON answers carried a C1 CSI and bidi overrides as they were."""
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Answer the question.\n", encoding="utf-8")
    hostile = "\x1b[2J\x1b]52;c;QQ==\x07\u009b31m\u202eb\r\x08"

    async def body(client):
        said = await fails(client, "plan", spec=text_spec(tmp_path / f"nope{hostile}.md", agent="host", reflector="host"))
        assert "nope\\x1b[2J\\x1b]52;c;QQ==\\x07\\x9b31m\\u202eb\\x0d\\x08.md" in said
        result = await client.call_tool("plan", {"spec": text_spec(prompt, agent=f"openai:gpt{hostile}", reflector="host")})
        text = result.content[0].text
        assert not result.is_error and result.structured_content["agent"] == f"openai:gpt{hostile}"
        assert json.loads(text) == result.structured_content and len(text.encode()) == sent_bytes(result.structured_content)
        assert UNSHOWN.search(said) is None and UNSHOWN.search(text) is None

    connected(body)


def test_the_runs_list_and_a_long_error_fit_one_page_and_the_rest_is_paged(home, tmp_path):
    """Hosts cut a tool result past ~8 KB anywhere: 40 runs with long paths were 12 KB, a spec's 30
    problems 9 KB."""
    target = tmp_path / ("a-long-folder-name-" * 8) / "prompt.md"
    target.parent.mkdir()
    target.write_text("Answer.\n", encoding="utf-8")
    spec, store = read_spec(text_spec(target, agent="host", reflector="host")), Service().store
    made = [store.create(spec, [], "Answer.\n", RunStatus(state="cancelled", target=str(target), message="x" * 2_000)).id
            for _ in range(45)]

    async def body(client):
        seen, skip = [], 0
        while skip is not None:
            result = await client.call_tool("runs", {"newest": 40, "skip": skip})
            assert len(result.content[0].text.encode()) <= PAGE_BYTES and not result.is_error
            page = result.structured_content
            assert page["runs"] and all(len(r["message"]) <= 300 for r in page["runs"])
            seen, skip = [r["id"] for r in page["runs"]] + seen, page["next_skip"]
        assert sorted(seen) == sorted(made) and len(set(seen)) == 45  # each once, newest pages first
        (tmp_path / "skill").mkdir()
        (tmp_path / "skill" / "SKILL.md").write_text("# a skill\n", encoding="utf-8")
        frozen = {**text_spec(tmp_path / "skill", agent="host", reflector="host"),
                  "frozen": [f"missing-{i:02d}-{'y' * 300}/*" for i in range(30)]}
        said = await fails(client, "plan", spec=frozen)
        assert len(said.encode()) <= PAGE_BYTES and said.endswith("more lines: fix these, then try again")

    connected(body)


def test_an_accept_over_a_folder_of_many_files_fits_one_page_and_counts_every_list(home, tmp_path):
    """A skill with 400 notes the user edited while the run went: accept kept them all and named
    every one, past the page; Codex cut the middle out of that answer, paths gone and the message
    still counting them all. The answer names the first of each list, its total, and where the
    whole list is; so does a status whose write-back wrote every file."""
    target = tmp_path / "my-skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    notes = [f"references/notes/customer-escalation-playbook-section-{i:04d}.md" for i in range(400)]
    (target / "references/notes").mkdir(parents=True)
    for name in notes:
        (target / name).write_text(f"# {name}\n", encoding="utf-8")

    async def body(client):
        run_id = (await call(client, "evolve", spec=demo_spec(target)))["run_id"]
        assert (await wait_for(client, run_id, ENDED))["state"] == "finished"
        for name in notes:  # the user's formatter went over every note meanwhile
            (target / name).write_text(f"# {name}\n\nReviewed.\n", encoding="utf-8")

        dry = await call(client, "accept", run_id=run_id, dry_run=True)
        assert sent_bytes(dry) <= PAGE_BYTES and dry["kept_total"] == 400 and dry["written"]
        assert dry["kept"] == notes[:len(dry["kept"])] and 0 < len(dry["kept"]) < 400
        assert "400 changed on disk" in dry["message"] and f"agentdescent accept --dry-run {run_id}" in dry["message"]
        assert Service().accept(run_id, dry_run=True).kept == notes  # the terminal's answer names every one

        done = await call(client, "accept", run_id=run_id)
        assert sent_bytes(done) <= PAGE_BYTES and done["kept_total"] == 400 and len(done["kept"]) < 400
        assert done["written_total"] == len(done["written"]) == len(dry["written"]) and done["backup"]
        assert done["answer_file"] and done["answer_file"] in done["message"]
        assert f"400 kept as they changed on disk since the run started: {notes[0]}" in done["message"]
        assert "and 395 more" in done["message"]  # the message names a few, whoever reads it
        assert json.loads(Path(done["answer_file"]).read_text(encoding="utf-8"))["kept"] == notes

        run = Service().store.get(run_id)  # as the accept of a run that changed every file records it
        everything = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
        run.write_status(run.status().model_copy(update={"wrote": on_disk(target, "skill_dir", everything)}))
        status = await call(client, "status", run_id=run_id)
        assert status["state"] == "accepted" and sent_bytes(status) <= PAGE_BYTES
        assert status["wrote_total"] == len(everything) > len(status["wrote"]) > 0

    connected(body)


def test_the_installed_program_serves_over_stdio(home, tmp_path):
    """`agentdescent-mcp` found on PATH, as a host launches it: a run from plan to reject."""
    from tests import keyword_domain

    program = Path(sys.executable).with_name("agentdescent-mcp")
    assert program.exists(), "install the package (pip install -e .) to get the agentdescent-mcp program"
    spec = keyword_domain.spec(tmp_path)

    async def main():
        async with mcp.Client(stdio_server(home, tmp_path), mode="legacy") as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
            report = await call(client, "doctor")
            assert report["store"] == str(home / "runs") and report["git"]["found"]
            assert (await call(client, "runs"))["runs"] == []
            assert (await call(client, "plan", spec=spec))["tasks"] == 24
            run_id = (await call(client, "evolve", spec=spec))["run_id"]
            assert (await wait_for(client, run_id, ENDED))["state"] == "finished"
            assert "+rule k0." in (await call(client, "show", run_id=run_id))["diff"]
            dry = await call(client, "accept", run_id=run_id, dry_run=True)
            assert dry["dry_run"] and dry["written"] == ["prompt.md"]
            assert "not touched" in (await call(client, "reject", run_id=run_id))["message"]
            assert (await call(client, "status", run_id=run_id))["state"] == "rejected"
            assert [r["id"] for r in (await call(client, "runs"))["runs"]] == [run_id]

    anyio.run(main)


def test_a_pending_l1_change_longer_than_a_page_is_read_whole_over_stdio(home, tmp_path):
    """A page at any offset dropped the pending change and paged the run's patch: a host saw a
    third of a change (whole=false, and no page leading to the rest) it could then accept."""
    from tests import l1_domain

    spec = l1_domain.spec(tmp_path, reflector="python:tests.l1_domain:fix_long")

    async def main():
        async with mcp.Client(stdio_server(home, tmp_path), mode="legacy") as client:
            run_id = (await call(client, "evolve", spec=spec))["run_id"]
            deadline = time.monotonic() + 90
            while "approval" not in ((status := await call(client, "status", run_id=run_id)).get("waiting_on") or ""):
                assert status["state"] in LIVE and time.monotonic() < deadline, status
                await anyio.sleep(0.1)
            pages = [await call(client, "show", run_id=run_id)]
            while pages[-1]["diff_continues"]:
                pages.append(await call(client, "show", run_id=run_id, offset=pages[-1]["next_offset"]))
            parts = [page["pending_approval"] for page in pages if page["pending_approval"]]
            assert len(parts) > 1 and not parts[0]["whole"] and not parts[-1]["diff_continues"]
            assert all(sent_bytes(page) <= PAGE_BYTES for page in pages)
            whole = Service().show(run_id)
            assert "".join(p["diff"] for p in parts) == whole.pending_approval.diff
            assert "+echo yes" in parts[-1]["diff"] and {p["change"] for p in parts} == {whole.pending_approval.change}
            assert "".join(page["diff"] for page in pages) == whole.diff
            await call(client, "accept", run_id=run_id, change=parts[0]["change"])
            assert (await wait_for(client, run_id, ENDED))["state"] == "finished"

    anyio.run(main)


def test_agentdescent_mcp_the_verb_serves_the_same_tools(home, tmp_path):
    env = program_env(home, tmp_path)

    async def main():
        async with mcp.Client(StdioServerParameters(command="agentdescent", args=["mcp"], env=env), mode="legacy") as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
            assert (await call(client, "runs"))["store"] == str(home / "runs")

    anyio.run(main)
