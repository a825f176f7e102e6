"""The host's side of a host-driven run, on a real mailbox: requests grouped by candidate and paged
under the hosts' limits, answered in a batch, leased to a holder and given back when it goes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import time as _real_clock  # the Clock's methods are named like the module's

import pytest

from agentdescent.agents.base import cut_off_at
from agentdescent.engine.calls import units
from agentdescent.errors import AgentError, UserError
from agentdescent.runs import hostfiles, hostwork
from agentdescent.runs import mailbox as mailbox_module
from agentdescent.runs.host import HostAgent
from agentdescent.runs.hostwork import Answer
from agentdescent.runs.mailbox import Claim, Mailbox
from agentdescent.runs.spec import RunSpec
from agentdescent.runs.status import RunStatus
from agentdescent.runs.store import RunDir
from agentdescent.types import Task

ME = Claim(holder="me", pid=os.getpid())


STOPPING = threading.Event()  # set as a test ends: its askers withdraw, as a cancelled run's do
ASKERS: list[threading.Thread] = []


@pytest.fixture
def run(tmp_path):
    """A live run's folder: its status says running and this process holds its lock. As the test
    ends, every call still waiting is withdrawn and its thread joined: none outlives its test."""
    folder = tmp_path / "run-1"
    folder.mkdir()
    made = RunDir(folder)
    spec = RunSpec.model_validate({"target": "prompt.md", "tasks": [{"id": "t", "prompt": "p"}], "agent": "host"})
    made.file("spec.json").write_text(spec.model_dump_json(), encoding="utf-8")
    made.write_status(RunStatus(id=made.id, state="running", target=spec.target))
    lock = made.lock()
    STOPPING.clear()
    yield made
    STOPPING.set()
    for thread in ASKERS:
        thread.join(5)
    ASKERS.clear()
    os.close(lock)


def asker(agent: HostAgent, call: dict, into: dict | None = None, key: str = "") -> threading.Thread:
    """A thread asking `agent` as the run's pool does; the answer goes to `into[key]`, and a call
    withdrawn as the test ends is no error."""
    def ask() -> None:
        try:
            answer = agent(**call)
        except AgentError:
            assert STOPPING.is_set()
            return
        if into is not None:
            into[key] = answer
    thread = threading.Thread(target=ask, daemon=True)
    ASKERS.append(thread)
    return thread


def post(run: RunDir, *calls: dict, kind: str = "rollout") -> list[threading.Thread]:
    """Each call asked of a HostAgent on its own thread, as the run's pool does; the threads."""
    agent = HostAgent(Mailbox(run.file("mailbox")), kind, timeout=30, gone=STOPPING.is_set)
    threads = [asker(agent, call) for call in calls]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while len(Mailbox(run.file("mailbox")).open()) < len(calls) and time.monotonic() < deadline:
        time.sleep(0.01)
    return threads


def test_requests_on_one_candidate_come_together_with_its_text_once(run):
    post(run, *({"prompt": f"task {i}", "context": "RULES A"} for i in range(3)),
         {"prompt": "task 9", "context": "RULES B"})
    work = hostwork.take(run, ME)
    assert sorted((g.context, len(g.requests)) for g in work.work) == [("RULES A", 3), ("RULES B", 1)]
    assert all(r.prompt.startswith("task") for g in work.work for r in g.requests)
    assert hostwork.take(run, ME).work == []  # what the holder took is not handed out again


def test_workspaces_with_the_same_files_are_one_candidate(run, tmp_path):
    spaces = []
    for i, text in enumerate(["same", "same", "other"]):
        space = tmp_path / f"ws{i}" / ".claude" / "skills" / "s"
        space.mkdir(parents=True)
        (space / "SKILL.md").write_text(text, encoding="utf-8")
        spaces.append(space.parents[2])
    post(run, *({"prompt": f"task {i}", "cwd": space} for i, space in enumerate(spaces)))
    work = hostwork.take(run, ME)
    assert sorted(len(g.requests) for g in work.work) == [1, 2]
    assert all(g.workspace for g in work.work)


def test_one_answer_stays_under_the_page_and_a_long_prompt_is_read_on(run):
    post(run, *({"prompt": f"task {i} " + "x" * 1500} for i in range(10)), {"prompt": "long " + "y" * 20_000})
    taken, pages = [], 0
    while True:
        work = hostwork.take(run, ME)
        if not work.work:
            break
        pages += 1
        assert hostfiles.sent_bytes(work) <= hostwork.PAGE_BYTES
        taken += [r for g in work.work for r in g.requests]
    assert pages > 1 and len(taken) == 11
    long = next(r for r in taken if r.prompt.startswith("long"))
    assert long.continues
    text, offset = long.prompt, len(long.prompt)
    while offset is not None:  # each page says where the next starts: a host need not count characters
        page = hostwork.read(run, long.request_id, offset)
        assert hostfiles.sent_bytes(page) <= hostwork.PAGE_BYTES
        assert page.next_offset == (offset + len(page.text) if page.continues else None)
        text, offset = text + page.text, page.next_offset
    assert text == "long " + "y" * 20_000


@pytest.mark.parametrize("chars", [1, 60, 400])
def test_many_short_requests_stay_under_the_page_as_the_host_receives_it(run, chars):
    """The page is measured as the MCP server sends it (compact JSON): measured as one form and sent
    as another (indented by 2), 55 requests of 60 characters made 8,495 bytes, past the 7,000 a page promises."""
    asked = hostwork.PAGE_REQUESTS + 20
    post(run, *({"prompt": f"{i} " + "x" * chars, "context": "RULES"} for i in range(asked)))
    while len(Mailbox(run.file("mailbox")).open()) < asked:  # a loaded machine starts the askers slowly
        time.sleep(0.05)
    taken = 0
    while (page := hostwork.take(run, ME)).work:
        assert hostfiles.sent_bytes(page) <= hostwork.PAGE_BYTES
        taken += sum(len(g.requests) for g in page.work)
    assert taken == asked


def test_a_batch_is_answered_once_each_and_the_askers_get_their_answers(run):
    box: dict[str, str] = {}
    agent = HostAgent(Mailbox(run.file("mailbox")), "rollout", timeout=30, gone=STOPPING.is_set)
    threads = [asker(agent, {"prompt": f"task {i}", "context": "A"}, box, f"t{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    requests = [r for g in hostwork.take(run, ME).work for r in g.requests]
    done = hostwork.submit(run, [Answer(request_id=r.request_id, answer=r.prompt.upper()) for r in requests])
    assert sorted(done.received) == sorted(r.request_id for r in requests) and done.refused == {}
    for thread in threads:
        thread.join(5)
    assert box == {f"t{i}": f"TASK {i}" for i in range(4)}


def test_work_a_gone_session_held_goes_back_at_once_and_a_live_one_keeps_it(run):
    post(run, {"prompt": "task 1", "context": "A"}, {"prompt": "task 2", "context": "A"})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert len([r for g in hostwork.take(run, Claim(holder="ended", pid=gone.pid)).work for r in g.requests]) == 2
    assert len([r for g in hostwork.take(run, ME).work for r in g.requests]) == 2  # its process is gone: void
    other = hostwork.take(run, Claim(holder="other", pid=os.getpid()))
    assert other.work == [] and other.waiting == 2 and "held by another conversation" in other.message
    assert hostwork.release(run, ME) == 2
    assert len([r for g in hostwork.take(run, Claim(holder="other", pid=os.getpid())).work for r in g.requests]) == 2


def test_calls_of_one_conversation_at_once_are_handed_each_request_once(run):
    post(run, *({"prompt": f"task {i}", "context": f"RULES {i % 3}"} for i in range(12)))
    pages: list[hostwork.HostWork] = []
    start = threading.Barrier(6)

    def call() -> None:
        start.wait()
        pages.append(hostwork.take(run, ME))  # a host's parallel tool calls, through one server

    callers = [threading.Thread(target=call) for _ in range(6)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)
    handed = [r.request_id for page in pages for g in page.work for r in g.requests]
    assert len(handed) == len(set(handed)) == 12
    assert all(page.waiting == 0 for page in pages)  # what a call of its own took is not "held by another"


class Clock:
    """The mailbox's clock, moved by the test: a lease's time is read from it, not from the machine."""

    def __init__(self) -> None:
        self.now = _real_clock.time()

    def time(self) -> float:
        return self.now

    @staticmethod
    def monotonic() -> float:  # the askers' waits stay real
        return _real_clock.monotonic()

    @staticmethod
    def sleep(seconds: float) -> None:
        _real_clock.sleep(seconds)


def test_a_lease_runs_out_without_work_on_it_and_is_renewed_by_reading_it_not_by_asking_for_more(run, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hostwork, "LEASE_SECONDS", 0.5)
    monkeypatch.setattr(mailbox_module, "time", clock)
    post(run, {"prompt": "task 1", "context": "A"})
    [group] = hostwork.take(run, Claim(holder="slow")).work  # no process to watch: the lease alone holds it
    clock.now += 0.3
    hostwork.read(run, group.requests[0].request_id, 0, holder=Claim(holder="slow"))  # still at work: renewed
    clock.now += 0.3
    assert hostwork.take(run, Claim(holder="other")).work == []
    assert hostwork.take(run, Claim(holder="slow")).work == []  # asking for more is not working on it
    clock.now += 0.3
    assert len(hostwork.take(run, Claim(holder="other")).work) == 1



def test_a_prompt_made_from_the_run_s_template_goes_as_its_task_with_the_template_once(run):
    template = "Use the skill. Which team handles this?\n\n{task}\n\nOne word."
    agent = HostAgent(Mailbox(run.file("mailbox")), "rollout", timeout=30, gone=STOPPING.is_set, template=template)
    prompts = [template.format(task=f"my invoice {i}") for i in range(3)] + ["Something else entirely"]
    threads = [asker(agent, {"prompt": p, "context": "A"}) for p in prompts]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    work = hostwork.take(run, ME).work
    templated = next(g for g in work if g.template is not None)
    assert templated.template == template  # the askers post in whatever order their threads run
    assert sorted(r.prompt for r in templated.requests) == [f"my invoice {i}" for i in range(3)]
    [whole] = [r.prompt for g in work if g.template is None for r in g.requests]
    assert whole == "Something else entirely" and [g.context for g in work if g.context] == ["A"]  # the text once


def test_a_new_candidate_near_one_the_holder_met_comes_as_the_files_that_differ(run, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, rules in ((first, "- invoice\n"), (second, "- invoice\n- refund\n")):
        (folder / "routing").mkdir(parents=True)
        (folder / "SKILL.md").write_text("# Router\n" + "Route each request by its words.\n" * 20, encoding="utf-8")
        (folder / "routing" / "billing.md").write_text(rules, encoding="utf-8")
    (first / "notes.md").write_text("old notes\n", encoding="utf-8")
    post(run, {"prompt": "task 1", "cwd": first})
    [met] = hostwork.take(run, ME).work
    assert met.base is None and set(met.files) == {"SKILL.md", "notes.md", "routing/billing.md"}
    hostwork.submit(run, [Answer(request_id=met.requests[0].request_id, answer="billing")])
    post(run, {"prompt": "task 2", "cwd": second})
    [near] = hostwork.take(run, ME).work
    assert near.base == met.candidate and near.files == {"routing/billing.md": "- invoice\n- refund\n"}
    assert near.deleted == ["notes.md"]
    assert "base" not in json.loads(met.model_dump_json())  # an empty field is left out of the page


def test_a_workspace_s_files_that_are_not_text_or_large_are_named_for_the_host_to_read_there(run, tmp_path):
    folder = tmp_path / "ws"
    (folder / "assets").mkdir(parents=True)
    (folder / "SKILL.md").write_text("# Skill\n", encoding="utf-8")
    (folder / "assets" / "logo.png").write_bytes(bytes(range(256)))
    (folder / "big.md").write_text("x" * (hostfiles.FILE_BYTES + 1), encoding="utf-8")
    post(run, {"prompt": "task 1", "cwd": folder})
    [met] = hostwork.take(run, ME).work
    assert met.files == {"SKILL.md": "# Skill\n"} and met.unsent == ["assets/logo.png", "big.md"]



def test_a_candidate_too_large_for_a_page_sends_what_fits_and_names_the_rest(run, tmp_path):
    """Its largest files are read in the workspace; a text or template past the page is read in a
    file of the run's folder: the answer stays under the page, request ids whole."""
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "SKILL.md").write_text("# Skill\n", encoding="utf-8")
    for name in ("a.md", "b.md"):
        (folder / name).write_text("x" * 150_000, encoding="utf-8")
    post(run, {"prompt": "task 1", "cwd": folder})
    work = hostwork.take(run, ME)
    [met] = work.work
    assert hostfiles.sent_bytes(work) <= hostwork.PAGE_BYTES
    assert met.files == {"SKILL.md": "# Skill\n"} and met.unsent == ["a.md", "b.md"] and len(met.requests) == 1

    text, template = "RULE " * 20_000, "You follow the rules. " * 2_000 + "{task}"
    agent = HostAgent(Mailbox(run.file("mailbox")), "rollout", timeout=30, gone=STOPPING.is_set, template=template)
    asker(agent, {"prompt": template.format(task="task 2"), "context": text}).start()
    while len(Mailbox(run.file("mailbox")).open()) < 2:
        time.sleep(0.01)
    work = hostwork.take(run, ME)
    [met] = work.work
    assert hostfiles.sent_bytes(work) <= hostwork.PAGE_BYTES and met.context is None and met.template is None
    assert open(met.context_file, encoding="utf-8").read() == text
    assert open(met.template_file, encoding="utf-8").read() == template


def named(group: hostwork.CandidateWork, field: str) -> list[str]:
    """The paths a group names in `field` (`unsent` or `deleted`), on the page or in the file it gives."""
    listed, spilled = getattr(group, field), getattr(group, f"{field}_file")
    assert listed is None or spilled is None
    return listed or (open(spilled, encoding="utf-8").read().splitlines() if spilled else [])


def skill_of_many_files(folder, count: int) -> dict[str, str]:
    """A skill folder of `count` one-line notes beside its SKILL.md, made in `folder`; its files by path."""
    disk = {"SKILL.md": "---\nname: my-skill\n---\nAnswer the question.\n" + "Read the notes. " * 40}
    disk |= {f"reference/section-{i // 50:02d}/note-{i:04d}-about-some-topic.md": f"note {i}\n" for i in range(count)}
    for path, text in disk.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    return disk


@pytest.mark.parametrize("count", [150, 600])
def test_a_folder_of_many_small_files_sends_what_fits_and_names_the_rest_within_the_page(run, tmp_path, count):
    """The paths a page leaves out have no bound of their own: past a page, their list is a file
    to read, and the page holds as many of the smallest files as fit."""
    folder = tmp_path / "ws"
    disk = skill_of_many_files(folder, count)
    post(run, {"prompt": "task 1", "cwd": folder})
    work = hostwork.take(run, ME)
    [met] = work.work
    assert hostfiles.sent_bytes(work) <= hostwork.PAGE_BYTES and len(met.requests) == 1
    assert len(met.files) > 50 and "SKILL.md" not in met.files  # the smallest first: the largest is read there
    assert all(disk[path] == text for path, text in met.files.items())
    assert sorted([*met.files, *named(met, "unsent")]) == sorted(disk)
    hostwork.submit(run, [Answer(request_id=met.requests[0].request_id, answer="done")])

    (folder / "SKILL.md").write_text("changed\n", encoding="utf-8")  # near the one met: the files it lacks come
    post(run, {"prompt": "task 2", "cwd": folder})
    work = hostwork.gather(run, ME, wait=10)  # the first may still be open, its asker not yet answered: post waits for one
    [near] = work.work
    assert hostfiles.sent_bytes(work) <= hostwork.PAGE_BYTES and near.base == met.candidate
    assert sorted([*near.files, *named(near, "unsent")]) == sorted(set(disk) - set(met.files))


def test_a_request_that_comes_while_a_page_is_gathered_goes_in_only_if_it_fits(run, tmp_path, monkeypatch):
    """Its candidate's group, however much of it is moved out, may not fit what the page has left:
    then it waits for the next page."""
    monkeypatch.setattr(hostwork, "SETTLE_S", 10.0)  # a loaded machine posts the second late: the page still waits for it
    monkeypatch.setattr(hostwork, "GATHER_S", 10.0)
    skill_of_many_files(tmp_path / "a", 150), skill_of_many_files(tmp_path / "b", 160)
    post(run, {"prompt": "task 1", "cwd": tmp_path / "a"})

    def later() -> None:  # once the first is taken: while the page is gathered
        while not any(claimed for _, claimed in Mailbox(run.file("mailbox")).open()):
            time.sleep(0.01)
        post(run, {"prompt": "task 2", "cwd": tmp_path / "b"})
    poster = threading.Thread(target=later, daemon=True)
    poster.start()
    work = hostwork.gather(run, ME, wait=10)
    poster.join(10)
    assert hostfiles.sent_bytes(work) <= hostwork.PAGE_BYTES
    assert [r.prompt for g in work.work for r in g.requests] == ["task 1"] and work.waiting == 1
    hostwork.submit(run, [Answer(request_id=work.work[0].requests[0].request_id, answer="done")])
    [met] = hostwork.take(run, ME).work
    assert [r.prompt for r in met.requests] == ["task 2"] and hostfiles.sent_bytes(met) < hostwork.PAGE_BYTES


def test_a_long_list_of_deleted_files_is_read_in_a_file_when_the_page_is_full(run):
    deleted = [f"reference/note-{i:04d}-about-some-topic.md" for i in range(600)]
    group = hostwork.CandidateWork(candidate="c2", kind="rollout", workspace="/ws", base="c1", deleted=deleted,
                                   files={"SKILL.md": "changed\n"}, requests=[])
    hostfiles.fitted(group, run, 6_000)
    assert hostfiles.sent_bytes(group) <= 6_000 and group.files == {"SKILL.md": "changed\n"} and group.deleted is None
    assert named(group, "deleted") == deleted


def test_a_rollout_helper_and_a_reflection_helper_of_one_conversation_each_get_the_text(run):
    """They share one holder (one MCP server), and each must read the candidate it works on."""
    post(run, {"prompt": "improve it", "context": "RULES A"}, kind="proposal")
    post(run, {"prompt": "task 1", "context": "RULES A"}, {"prompt": "task 2", "context": "RULES A"})
    while len(Mailbox(run.file("mailbox")).open()) < 3:  # post waits for as many open as it posted: 2 of 3
        time.sleep(0.01)
    [rollouts] = hostwork.take(run, ME, ("rollout",)).work
    [proposals] = hostwork.take(run, ME, ("proposal",)).work
    assert rollouts.candidate == proposals.candidate and rollouts.context == proposals.context == "RULES A"
    post(run, {"prompt": "task 3", "context": "RULES A"})
    while len(Mailbox(run.file("mailbox")).open()) < 4:
        time.sleep(0.01)
    assert hostwork.take(run, ME, ("rollout",)).work[0].context is None  # met before: its id alone
    assert hostwork.release(run, ME) == 4
    # given back, lost: the holder lost what it was sent with them (a result cut, a helper ended)
    assert hostwork.take(run, ME, ("rollout",)).work[0].context == "RULES A"
    hostwork.release(run, ME)
    assert hostwork.take(run, ME, ("rollout",), fresh=True).work[0].context == "RULES A"  # a helper just started


def test_requests_a_conversation_took_and_lost_are_named_and_given_back_by_release(run):
    post(run, *({"prompt": f"task {i}"} for i in range(3)))
    assert sum(len(group.requests) for group in hostwork.take(run, ME).work) == 3
    again = hostwork.gather(run, ME, wait=5)  # a new helper of the same conversation; at once, not after the wait
    assert again.work == [] and "holds 3 request(s) it took before" in again.message and "host_release" in again.message
    assert hostwork.release(run, ME) == 3
    assert sum(len(group.requests) for group in hostwork.take(run, ME).work) == 3


def test_reading_and_answering_keep_a_holder_s_other_requests_held(run, monkeypatch):
    post(run, *({"prompt": f"task {i}"} for i in range(2)))
    first = [r.request_id for group in hostwork.take(run, ME).work for r in group.requests]
    assert len(first) == 2
    clock = [time.time() + hostwork.LEASE_SECONDS - 1]
    monkeypatch.setattr(mailbox_module.time, "time", lambda: clock[0])
    hostwork.read(run, first[0], 0, holder=ME)
    clock[0] += hostwork.LEASE_SECONDS - 1  # past the first lease: held by the read's renewal
    other = Claim(holder="other", pid=os.getpid())
    assert hostwork.take(run, other).work == []


def test_answering_a_proposal_keeps_only_the_holders_proposals_held(run, monkeypatch):
    """Every claim of the holder was renewed: rollouts a dead rollout helper held stayed held for
    as long as its reflection helper answered."""
    post(run, {"prompt": "improve it", "context": "R"}, {"prompt": "and again", "context": "R"}, kind="proposal")
    post(run, {"prompt": "task 1", "context": "R"})
    while len(Mailbox(run.file("mailbox")).open()) < 3:
        time.sleep(0.01)
    [rollout] = hostwork.take(run, ME, ("rollout",)).work[0].requests
    proposals = hostwork.take(run, ME, ("proposal",)).work[0].requests
    clock = [time.time() + hostwork.LEASE_SECONDS - 1]
    monkeypatch.setattr(mailbox_module.time, "time", lambda: clock[0])
    hostwork.submit(run, [Answer(request_id=proposals[0].request_id, answer="<rule>R2</rule>")], ME)
    clock[0] += 2  # past the rollout's lease; the other proposal's was renewed by the answer
    other = Claim(holder="other", pid=os.getpid())
    assert [r.request_id for group in hostwork.take(run, other, ("rollout",)).work for r in group.requests] == \
        [rollout.request_id]
    assert hostwork.take(run, other, ("proposal",)).work == []


def test_a_batch_answering_a_request_twice_keeps_the_first(run):
    post(run, {"prompt": "task 1"})
    [request] = hostwork.take(run, ME).work[0].requests
    done = hostwork.submit(run, [Answer(request_id=request.request_id, answer="a"),
                                 Answer(request_id=request.request_id, answer="b")], ME)
    assert done.received == [request.request_id] and "answers it twice" in done.refused[request.request_id]


def test_asking_for_work_a_run_does_not_give_the_host_is_refused(run):
    spec = RunSpec.model_validate({"target": "prompt.md", "tasks": [{"id": "t", "prompt": "p"}], "agent": "host",
                                   "reflector": "python:tests.keyword_domain:next_rule"})
    run.file("spec.json").write_text(spec.model_dump_json(), encoding="utf-8")
    with pytest.raises(UserError, match="asks the host for no proposal: its reflector is python, not host"):
        hostwork.take(run, ME, ("proposal",))
    assert hostwork.take(run, ME).work == []  # both kinds asked: the rollouts it does give

def test_show_comes_in_pages_a_host_shows_whole_and_the_patch_comes_back_whole():
    from agentdescent.runs.review import DiffView, RolloutView, Shown
    from agentdescent.runs.shown_page import paged

    diffs = [DiffView(diff_id=f"d{i}", round=i, author="w0", outcome="committed", reason="P(improve)=0.99 " * 20,
                      keys=["routing/billing.md"], edits=[f"+ word {j}" for j in range(10)],
                      evidence_tasks=[f"t{j}" for j in range(12)], evidence_rewards=[0.0] * 12, rationale="why " * 150)
             for i in range(30)]
    patch = "".join(f"+- word {i} ünïcode\n" for i in range(3_000))
    shown = Shown(run_id="r", state="finished", target="/t", diff=patch, files_changed=["routing/billing.md"],
                  initial_reward=0.0, final_reward=1.0, version=3, committed=diffs, committed_total=30,
                  rejected=diffs[:20], rejected_total=45, next="accept", pending_approval=None,
                  worst_rollouts=[RolloutView(task_id="t", held_out=True, reward=0.0, prompt="p" * 5_000, output="o" * 5_000)])
    pages = [paged(shown)]
    while pages[-1].diff_continues:
        assert pages[-1].next_offset == pages[-1].diff_offset + len(pages[-1].diff)
        pages.append(paged(shown, offset=pages[-1].next_offset))
    assert all(hostfiles.sent_bytes(page) <= hostwork.PAGE_BYTES for page in pages) and pages[-1].next_offset is None
    assert "".join(page.diff for page in pages) == patch and len(pages) > 3
    first = pages[0]
    assert first.committed and first.committed_total == 30 and first.rejected_total == 45
    assert len(first.committed[0].rationale) <= 160 and len(first.worst_rollouts[0].output) <= 160
    assert len(first.diff) >= 1_000  # the patch starts on the first page, whatever the evidence
    assert not any(page.committed or page.worst_rollouts for page in pages[1:])


def test_a_change_to_many_files_names_the_first_on_the_page_and_counts_them_all():
    from agentdescent.runs.review import Shown
    from agentdescent.runs.shown_page import paged

    for files, length in ((400, 60), (20, 400)):  # many files, long names
        names = [f"references/{i:04d}-" + "n" * length + ".md" for i in range(files)]
        shown = Shown(run_id="r", state="finished", target="/t", diff="+x\n" * 2_000, files_changed=names,
                      files_changed_total=files, initial_reward=0.0, final_reward=1.0, version=3, committed=[],
                      rejected=[], rejected_total=0, next="", pending_approval=None, worst_rollouts=[])
        first = paged(shown)
        assert hostfiles.sent_bytes(first) <= hostwork.PAGE_BYTES and first.files_changed_total == files
        assert 0 < len(first.files_changed) < files and first.files_changed == names[:len(first.files_changed)]
        assert len(first.diff) >= 1_000  # room is kept for the patch, which names every file


def test_a_pending_l1_change_comes_whole_on_the_first_page_or_says_it_does_not():
    """Its diff was cut to 640 characters: a host could ask for an approval of a change it showed
    the user a quarter of."""
    from agentdescent.runs.review import DiffView, PendingApproval, Shown
    from agentdescent.runs.shown_page import paged

    diffs = [DiffView(diff_id=f"d{i}", round=i, author="w0", outcome="committed", reason="r " * 50, keys=["a.md"],
                      edits=["+ x"], evidence_tasks=["t"], evidence_rewards=[0.0], rationale="why " * 50)
             for i in range(30)]
    for size, whole in ((3_000, True), (20_000, False)):
        change = "".join(f"+echo {i}\n" for i in range(size // 8))
        pending = PendingApproval(change="abc123def456", keys=["scripts/a.sh"], verdict="passed", rationale="r",
                                  diff=change)
        shown = Shown(run_id="r", state="running", target="/t", diff="+x\n" * 2_000, files_changed=["a.md"],
                      initial_reward=0.0, final_reward=None, version=3, committed=diffs, committed_total=30,
                      rejected=[], rejected_total=0, next="", pending_approval=pending, worst_rollouts=[])
        first = paged(shown)
        assert hostfiles.sent_bytes(first) <= hostwork.PAGE_BYTES
        assert first.pending_approval.whole is whole and change.startswith(first.pending_approval.diff)
        assert (first.pending_approval.diff == change) is whole


def test_a_pending_l1_change_longer_than_a_page_is_paged_to_its_end_before_the_patch():
    """A page at any offset dropped the pending change and paged the patch: a host could read a
    third of a change it was to ask the user to approve, and nothing led to the rest."""
    from agentdescent.runs.review import PendingApproval, Shown
    from agentdescent.runs.shown_page import paged

    change = "".join(f"+echo ünïcode {i}\n" for i in range(1_500))
    patch = "".join(f"+- word {i}\n" for i in range(1_500))
    pending = PendingApproval(change="abc123def456", keys=["scripts/a.sh"], verdict="passed", rationale="r", diff=change)
    shown = Shown(run_id="r", state="running", target="/t", diff=patch, files_changed=["a.md"], initial_reward=0.0,
                  final_reward=None, version=3, committed=[], rejected=[], rejected_total=0, next="",
                  pending_approval=pending, worst_rollouts=[])
    pages = [paged(shown)]
    while pages[-1].diff_continues:
        pages.append(paged(shown, offset=pages[-1].next_offset))
    assert all(hostfiles.sent_bytes(page) <= hostwork.PAGE_BYTES for page in pages) and pages[-1].next_offset is None
    parts = [page.pending_approval for page in pages if page.pending_approval is not None]
    assert len(parts) > 2 and all(p.change == "abc123def456" and not p.whole for p in parts)
    assert [p.diff_continues for p in parts] == [True] * (len(parts) - 1) + [False]
    assert all(p.diff_offset == sum(len(q.diff) for q in parts[:i]) for i, p in enumerate(parts))
    assert "".join(p.diff for p in parts) == change  # the change whole, then the patch whole
    assert not any(page.diff for page in pages[:len(parts) - 1]) and "".join(page.diff for page in pages) == patch


def test_a_helper_cannot_answer_a_persons_approval(run):
    """host_submit answered the L1 approval `show` names, and the change was recorded as declined by
    the person, whose accept of it was then refused."""
    box, asked = Mailbox(run.file("mailbox")), {}

    def approval():
        try:
            asked["answer"] = box.ask("approval", {"change": "c1"}, timeout=30, gone=STOPPING.is_set)
        except AgentError:
            pass
    thread = threading.Thread(target=approval, daemon=True)
    ASKERS.append(thread)
    thread.start()
    while not box.open():
        time.sleep(0.01)
    [(request, _)] = box.open()
    done = hostwork.submit(run, [Answer(request_id=request.id, answer="yes")], ME)
    assert done.received == [] and "a person answers an approval" in done.refused[request.id]
    assert box.open() and "answer" not in asked  # still waiting for the person


def test_an_answer_given_as_its_request_is_withdrawn_is_refused_not_left_behind(run):
    """An answer read the request before the asker withdrew it and wrote itself after: told
    "received", it was left behind, answering nothing (tried 100 times, each answer given at once
    again and again while the asker takes the first and withdraws)."""
    box = Mailbox(run.file("mailbox"))

    def ask():
        with contextlib.suppress(AgentError):
            box.ask("rollout", {"prompt": "p"}, timeout=5)

    for _ in range(100):
        asker = threading.Thread(target=ask)
        asker.start()
        while not box.open() and asker.is_alive():
            pass
        [(request, _)] = box.open()
        while asker.is_alive():
            with contextlib.suppress(UserError):
                box.answer(request.id, {"answer": "a"})
        asker.join()
        assert not list(box.folder.glob("*.answer.json"))  # taken by the asker, or refused


def test_a_page_hands_out_no_more_requests_than_one_submit_takes(run):
    post(run, *({"prompt": f"t{i}", "context": "R"} for i in range(hostwork.PAGE_REQUESTS + 6)))
    work = hostwork.take(run, ME, budget=10**7)
    assert sum(len(group.requests) for group in work.work) == hostwork.PAGE_REQUESTS and work.waiting == 6


def test_of_two_takers_of_work_whose_claim_went_void_one_gets_each_request(run):
    """A void claim was replaced by an unlink and a link: a second taker could unlink the first's
    new claim, and both were handed the request (the race is tried three times over 120)."""
    box = Mailbox(run.file("mailbox"))
    post(run, *({"prompt": f"t{i}"} for i in range(120)))
    # a killed MCP server's: void at once (a pid past the highest pid_max Linux allows, so that no
    # process started meanwhile by the rest of the suite can take it over)
    dead = Claim(holder="gone", pid=2**22 + 1)
    takers = [Claim(holder=name, pid=os.getpid()) for name in ("a", "b")]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the two threads interleave every few bytecodes, as two processes would
    try:
        for _ in range(3):
            for taker in takers:
                box.release(taker)
            assert all(box.claim(request.id, holder=dead, lease=60) for request, _ in box.open())
            won: dict[str, list[str]] = {"a": [], "b": []}
            start = threading.Barrier(2)

            def take(taker):
                start.wait()
                won[taker.holder] += [request.id for request, _ in box.open()
                                      if box.claim(request.id, holder=taker, lease=60)]

            racers = [threading.Thread(target=take, args=(taker,)) for taker in takers]
            for racer in racers:
                racer.start()
            for racer in racers:
                racer.join(60)
            assert not set(won["a"]) & set(won["b"]) and len(won["a"]) + len(won["b"]) == 120
    finally:
        sys.setswitchinterval(switching)


def test_a_rollout_nobody_takes_says_how_the_host_takes_it(run):
    """It said to fix the agent or the scorer, neither of which a host run has to fix."""
    agent = HostAgent(Mailbox(run.file("mailbox")), "rollout", timeout=0.3, gone=lambda: False)
    with pytest.raises(AgentError, match="no answer to rollout request .* within 0.3 s .*host_next .*host_timeout"):
        agent("task 1", context="R")


def test_a_rollout_abandoned_at_rollout_timeout_withdraws_its_request_and_a_late_answer_is_told_why(run):
    """Its request stayed open for host_timeout (1800 s by default) after the run gave up on it:
    the host was asked for it, and an answer to it was taken and never read."""
    box, asked = Mailbox(run.file("mailbox")), []
    agent = HostAgent(box, "rollout", timeout=600, gone=STOPPING.is_set)

    def host_rollout(rendered, task):
        asked.append(threading.current_thread())
        return agent(task.prompt, context=rendered)

    rolled: list = []
    rolling = threading.Thread(target=lambda: rolled.append(units.roll_out(
        host_rollout, lambda task, output: 1.0, "R", Task(id="t1", prompt="task 1"), timeout=2)))
    rolling.start()
    work = hostwork.gather(run, ME, wait=10)  # the host takes it, and does not answer in time
    [request_id] = [request.request_id for group in work.work for request in group.requests]
    rolling.join(30)
    assert "rollout_timeout=2 s" in rolled[0].error
    asked[0].join(10)  # the call ends with its rollout, not host_timeout later
    assert not asked[0].is_alive() and not list(box.folder.glob("*.request.json"))
    assert hostwork.waiting_on(run) is None
    again = hostwork.take(run, ME)
    assert again.work == [] and again.held == 0 and "holds" not in again.message
    late = hostwork.submit(run, [Answer(request_id=request_id, answer="late")], ME)
    assert late.received == [] and "withdrawn unanswered (no answer within rollout_timeout=2 s" in late.refused[request_id]


def test_a_host_call_whose_rollout_has_run_out_posts_nothing_and_is_not_billed(run):
    box = Mailbox(run.file("mailbox"))
    agent = HostAgent(box, "rollout", timeout=0.3, gone=lambda: False)
    with cut_off_at(time.monotonic() - 1, "rollout_timeout=2 s, the limit of the rollout"):
        with pytest.raises(AgentError, match="the request was not posted: rollout_timeout=2 s, the limit .* had run out"):
            agent("task 1", context="R")
    assert not list(box.folder.glob("*.request.json")) and agent.usage.calls == 0
