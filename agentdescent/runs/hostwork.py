"""The host's side of a host-driven run: taking requests, grouped and paged; answering them in a batch.

A run whose agent or reflector is `host` posts each rollout and reflection to its mailbox
(`runs.host`). A host conversation (one MCP server, one `holder`) takes them with `take`, answers with
`submit`, and gives back what it holds with `release`. What it takes is cut to the host's limits:

- **grouped by candidate**: the requests that roll out the same candidate artifact come together,
  with the candidate's id and its workspace; the first time a holder meets a candidate, its files
  come too (when they fit the page), and a text artifact's text, so that the host reads each
  candidate once, whatever the number of requests (a candidate near one it met comes as the files
  that differ from that one's); each request then holds only its task, and
  where the run's prompts share a template, only the task's own text (the group has the template);
- **gathered**: `gather` waits for the first request, then for the rest of its wave (the run
  posts a wave's requests within moments of each other), so one answer carries a whole wave;
- **paged**: one answer stays under `PAGE_BYTES` of JSON, so a host that cuts long tool results
  never loses a request id in the middle of one; a longer prompt is cut, and `read` pages on;
- **leased**: a claim holds `LEASE_SECONDS`, renewed while its holder works on its kind (reads
  one of those it holds, answers some), and is void at once when the holder's process is gone (a
  conversation that ended), so work a dead one took goes back to the queue without waiting; a
  helper that just starts (`fresh`) holds nothing taken before, so its kind's claims go back at
  once, and `release` gives back one kind's (a conversation's two helpers share its holder).

Left out: the mailbox's files (`mailbox`), the asking side (`host`) and the tools (the MCP server).
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentdescent.artifacts.strategies import MAX_TREE_PROPOSAL_CHARS
from agentdescent.errors import UserError
from agentdescent.reflect.reflector import APART
from agentdescent.runs.host import APPROVAL, PROPOSAL, ROLLOUT
from agentdescent.runs.hostfiles import Seen, fitted, sent_bytes, workspace_files
from agentdescent.runs.mailbox import Claim, Mailbox, Request
from agentdescent.runs.status import LIVE
from agentdescent.runs.store import RunDir

LEASE_SECONDS = 60.0  # a request taken and not answered goes back to the queue this long after its holder's last call
PAGE_BYTES = 7_000  # one answer's JSON: under the ~8 KB some hosts show whole
PAGE_REQUESTS = 64  # requests one answer hands out: as many as one host_submit takes
SETTLE_S, GATHER_S, POLL_S = 0.5, 4.0, 0.1  # a wave is in once nothing new came for SETTLE_S; GATHER_S at most
MAX_ANSWER_CHARS = MAX_TREE_PROPOSAL_CHARS  # an answer: at most what a reflection on a folder may hold
KINDS = (ROLLOUT, PROPOSAL)


def _unless_none() -> Any:
    """A field that defaults to None and is left out when it is: a page holds requests, not nulls."""
    return Field(default=None, exclude_if=lambda value: value is None)


class HostRequest(BaseModel):
    request_id: str
    prompt: str  # a rollout's task, or a reflection's whole prompt (a page of it: see `continues`)
    continues: bool = Field(default=False, exclude_if=lambda value: not value)  # the prompt goes on: `read` gives the rest


class CandidateWork(BaseModel):
    """Requests of one kind on one candidate artifact."""

    candidate: str  # the same id means the same artifact: read it once
    kind: str  # rollout or proposal
    workspace: str | None = _unless_none()  # a folder run: the candidate's files are here (any request's workspace will do)
    files: dict[str, str] | None = _unless_none()  # the workspace's files, the first time this holder meets the candidate
    base: str | None = _unless_none()  # `files` holds only the files that differ from this candidate's, met before
    deleted: list[str] | None = _unless_none()  # with `base`: its files this candidate does not have
    deleted_file: str | None = _unless_none()  # `deleted`, too long to send: read it in this file, one path a line
    unsent: list[str] | None = _unless_none()  # the workspace's files `files` leaves out (not text, or large): read there
    unsent_file: str | None = _unless_none()  # `unsent`, too long to send: read it in this file, one path a line
    context: str | None = _unless_none()  # a text run: the artifact each task is done with, the first time this holder meets it
    context_file: str | None = _unless_none()  # the context, too long to send: read it in this file
    template: str | None = _unless_none()  # each request's whole prompt is this with {task} replaced by the request's prompt
    template_file: str | None = _unless_none()  # the template, too long to send: read it in this file
    requests: list[HostRequest]


class HostWork(BaseModel):
    run_id: str
    work: list[CandidateWork]
    running: bool
    waiting: int = 0  # requests still open after these (taken by another conversation, or past this page)
    message: str
    held: int = Field(default=0, exclude=True)  # requests the holder had taken before this call and not answered


class Answer(BaseModel):
    """One request's answer: a rollout's is the answer to its task, a proposal's the reply its prompt asks for."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not an answer left out

    request_id: str = Field(max_length=64)
    answer: str = Field(max_length=MAX_ANSWER_CHARS)


class Released(BaseModel):
    run_id: str
    released: int  # requests given back


class Submitted(BaseModel):
    run_id: str
    received: list[str]
    refused: dict[str, str] = Field(default_factory=dict)  # request id -> why
    message: str


class Page(BaseModel):
    run_id: str
    request_id: str
    text: str
    offset: int
    continues: bool
    next_offset: int | None = None  # where the next page starts (while `continues`): host_read's offset then


def take(run: RunDir, holder: Claim, kinds: tuple[str, ...] = KINDS, *, budget: int = PAGE_BYTES,
         fresh: bool = False) -> HostWork:
    """Claim for `holder` the open requests of `kinds` that fit in one page, grouped by candidate
    (its own void claims too: asking for more is not working on them). `fresh`: the caller is a
    helper that just started: it holds nothing taken before (what the holder held of `kinds` goes
    back to the queue, to this take first) and has met no candidate, so each comes whole again."""
    return _take(run, holder, _asked(run, kinds), budget=budget, fresh=fresh)


def _take(run: RunDir, holder: Claim, kinds: tuple[str, ...], *, budget: int = PAGE_BYTES,
          fresh: bool = False, topping: bool = False) -> HostWork:
    """`take` of `kinds` the run is known to ask the host for; `topping`: to add to a page already
    taken, whose room `budget` is, so nothing past it goes in."""
    mailbox = Mailbox(run.file("mailbox"))
    listing = [(request, claimed) for request, claimed in mailbox.open() if request.kind in kinds]
    if fresh and mailbox.release(holder, listing):
        listing = [(request, claimed) for request, claimed in mailbox.open() if request.kind in kinds]
    mine = mailbox.holds(holder, listing, lease=LEASE_SECONDS)
    held = len(mine)
    seen = {kind: Seen(run, holder, kind, forget=fresh) for kind in kinds}
    groups: dict[tuple, CandidateWork] = {}
    left, waiting = budget - 400 - len(_lost(held)), 0  # room for the answer's own fields, its message at its longest
    for request, claimed in listing:
        if request.id in mine:
            continue  # taken before: the holder has it
        key, text = _group(request), _text(request)
        if key in groups:
            group, files = groups[key], None
        else:
            group, files = _opened(request, seen[request.kind])
            offered = set(group.files or ())  # the files that differ from its base's, or all of them
            if not groups:  # the page's first group goes whole into it, or as much of it as can
                fitted(group, run, left - min(len(json.dumps(text)), 300) - 130)
        size = len(json.dumps(text)) + _request_bytes(request.id) + (0 if key in groups else sent_bytes(group) + 1)
        full = size > left and (groups or topping) or sum(len(g.requests) for g in groups.values()) >= PAGE_REQUESTS
        if full or not mailbox.claim(request.id, holder=holder, lease=LEASE_SECONDS):
            waiting += mailbox.holder_of(request.id) != holder.holder  # not: a call of its own, at once, took it
            continue
        if key not in groups:
            groups[key] = group
            if group.candidate not in seen[request.kind]:  # a candidate met before keeps the digests it was sent with
                sent = {path: text for path, text in (files or {}).items() if path in (group.files or ()) or path not in offered}
                seen[request.kind].add(group.candidate, sent)
        page = cut_to(text, max(200, left - size + len(json.dumps(text))))
        group.requests.append(HostRequest(request_id=request.id, prompt=page, continues=len(page) < len(text)))
        left -= size
    for kind_seen in seen.values():
        kind_seen.save()
    status = run.status()
    running = status.state in LIVE
    work = list(groups.values())
    return HostWork(run_id=run.id, work=work, running=running, waiting=waiting, held=held,
                    message=_said(work, waiting, running, status.state, held))


def _asked(run: RunDir, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds of `kinds` the run asks the host for; a `UserError` when it asks none of them
    (a helper waiting for them would wait for the whole run)."""
    _known(kinds)
    spec = run.spec()
    asked = {ROLLOUT: spec.agent.kind == "host", PROPOSAL: (spec.reflector or spec.agent).kind == "host"}
    mine = tuple(kind for kind in kinds if asked[kind])
    if not mine:
        who = {ROLLOUT: f"agent is {spec.agent.kind}", PROPOSAL: f"reflector is {(spec.reflector or spec.agent).kind}"}
        raise UserError(f"run {run.id} asks the host for no {' or '.join(kinds)}: its "
                        f"{' and its '.join(who[kind] for kind in kinds)}, not host; no such request will come, "
                        "so there is nothing to wait for")
    return mine


def _known(kinds: tuple[str, ...]) -> None:
    for kind in kinds:
        if kind not in KINDS:
            raise UserError(f"kind must be {ROLLOUT!r} or {PROPOSAL!r}; got {kind!r}")


def gather(run: RunDir, holder: Claim, kinds: tuple[str, ...] = KINDS, *, wait: float = 0.0,
           fresh: bool = False) -> HostWork:
    """`take`, waiting up to `wait` seconds for a first request, then for the rest of its wave:
    until nothing new came for `SETTLE_S`, the page is full, or `GATHER_S` passed."""
    deadline = time.monotonic() + wait
    kinds = _asked(run, kinds)  # once: the polls below read the mailbox, not the spec again
    work = _take(run, holder, kinds, fresh=fresh)
    held = work.held  # what it held when it called: what a later take of this call finds is this call's
    while not work.work and work.running and not held and time.monotonic() < deadline:
        time.sleep(POLL_S)
        work = _take(run, holder, kinds)
    settled, until = time.monotonic() + SETTLE_S, time.monotonic() + GATHER_S
    while work.work and not work.waiting and time.monotonic() < min(settled, until):
        time.sleep(POLL_S)
        more = _take(run, holder, kinds, budget=PAGE_BYTES - sent_bytes(work), topping=True)
        if more.work:
            work = _merged(work, more)
            settled = time.monotonic() + SETTLE_S
        elif more.waiting:
            work = work.model_copy(update={"waiting": more.waiting})
    return work.model_copy(update={"message": _said(work.work, work.waiting, work.running, run.status().state, held)})


def submit(run: RunDir, answers: list[Answer], holder: Claim | None = None) -> Submitted:
    """Answer each request once; an answer to a request that is gone is refused, with why (each
    reason said once: a later id refused for it says "as for" the first), and every answer to a
    run that has stopped, since nothing waits for them: a resumed run asks its questions anew.
    Where `holder` held one it answered, its other claims of that kind are renewed (it is at work)."""
    mailbox = Mailbox(run.file("mailbox"))
    received: list[str] = []
    refused: dict[str, str] = {}
    state = run.status().state
    asked = _asked(run, KINDS)  # a run that asks the host for nothing has nothing a helper may answer
    listing = mailbox.open() if holder is not None else []  # before the answers: an answered one leaves it
    for given in answers:
        try:
            if state not in LIVE:
                raise UserError(f"run {run.id} is {state}: nothing waits for answers to its requests; "
                                "if it is resumed, take its requests again")
            if given.request_id in received or given.request_id in refused:
                raise UserError("this batch answers it twice; the first answer is the one taken")
            mailbox.answer(given.request_id, {"answer": given.answer}, kinds=asked)
            received.append(given.request_id)
        except UserError as exc:
            refused.setdefault(given.request_id, str(exc))
    if holder is not None and received:
        answered = {request.kind for request, claimed in listing
                    if request.id in received and claimed is not None and claimed.holder == holder.holder}
        mailbox.renew(holder, [(request, claimed) for request, claimed in listing if request.kind in answered])
    first: dict[str, str] = {}
    for request_id, why in refused.items():
        first.setdefault(why, request_id)
    refused = {request_id: why if first[why] == request_id else f"as for {first[why][:12]}"  # ids are 12 long
               for request_id, why in refused.items()}
    said = f"received {len(received)}" + (f", refused {len(refused)} (see refused)" if refused else "")
    return Submitted(run_id=run.id, received=received, refused=refused,
                     message=f"{said}; received is not accepted: the run decides whether each lands (a "
                             "reflection is refused when it cannot be read, touches a frozen file, leaves part of a "
                             "file out or stops before a file's </file>, and must pass the run's test); show says "
                             "what became of it")


def release(run: RunDir, holder: Claim, kinds: tuple[str, ...] = KINDS) -> int:
    """Give back every request of `kinds` `holder` took and did not answer, and forget what it was
    sent of them: a helper whose work was lost (it ended, a result was cut) lost the candidates with
    it, so its next take sends them whole. Only `kinds`: a conversation's other helper, of the other
    kind, shares the holder and is still at work."""
    _known(kinds)
    mailbox = Mailbox(run.file("mailbox"))
    released = mailbox.release(holder, [(request, claimed) for request, claimed in mailbox.open() if request.kind in kinds])
    for kind in kinds:
        Seen(run, holder, kind, forget=True).save()
    return released


def read(run: RunDir, request_id: str, offset: int, *, budget: int = PAGE_BYTES, holder: Claim | None = None) -> Page:
    """A page of an open request's prompt from `offset` (characters); where `holder` holds it,
    its claims of its kind are renewed (it is at work)."""
    mailbox = Mailbox(run.file("mailbox"))
    listing = mailbox.open()
    found = next((r for r, _ in listing if r.id == request_id), None)
    if found is None:
        raise UserError(f"there is no open request {request_id!r}; take the open ones again")
    if holder is not None and mailbox.holder_of(request_id) == holder.holder:
        mailbox.renew(holder, [(request, claimed) for request, claimed in listing if request.kind == found.kind])
    text = _text(found)
    page = cut_to(text[max(0, offset):], budget - 300)
    continues = offset + len(page) < len(text)
    return Page(run_id=run.id, request_id=request_id, text=page, offset=offset, continues=continues,
                next_offset=offset + len(page) if continues else None)


def waiting_on(run: RunDir, *, now: float | None = None) -> str | None:
    """What a live run waits for, in one line: the host's rollouts or reflections, a person's approval."""
    now = time.time() if now is None else now
    open_ = Mailbox(run.file("mailbox")).open()
    said = []
    for kind in KINDS:
        mine = [claimed for request, claimed in open_ if request.kind == kind]
        if mine:
            free = sum(1 for claimed in mine if claimed is None or claimed.void(LEASE_SECONDS, now))
            said.append(f"the host: {len(mine)} {kind}(s) open, {free} not yet taken (host_next)")
    for request in [request for request, _ in open_ if request.kind == APPROVAL][:1]:
        said.append(f"your approval of L1 change {request.id} (show it, then accept or reject it naming change "
                    f"{request.id})")
    return "; ".join(said) or None


def whole_prompt(group: CandidateWork, request: HostRequest, context: str | None = None) -> str:
    """A request's prompt as the host is to read it: inside its group's template, and with
    `context` (the candidate's text, sent the first time) where a reflection's prompt says its
    artifact is given beside it."""
    template = group.template
    if template is None and group.template_file is not None:
        with open(group.template_file, encoding="utf-8") as file:
            template = file.read()
    prompt = template.replace("{task}", request.prompt) if template else request.prompt
    return prompt.replace(APART, context) if context is not None else prompt


def _text(request: Request) -> str:
    return str(request.body.get("prompt", ""))


def _key(request: Request) -> str:
    """Its candidate's id: requests with the same one are done with the same artifact."""
    return str(request.body.get("candidate") or f"single-{request.id}")


def _group(request: Request) -> tuple[str, str, str | None]:
    """The group a request goes in: its candidate, its kind and its template are the group's."""
    template = request.body.get("template")
    return _key(request), request.kind, template if isinstance(template, str) else None


def _group_of(work: CandidateWork) -> tuple[str, str, str | None]:
    return work.candidate, work.kind, work.template


def _opened(request: Request, seen: Seen) -> tuple[CandidateWork, dict[str, str] | None]:
    """The group `request` opens, with no request yet: its candidate, kind and template, and the
    first time this holder meets the candidate its context and its files (or those that differ
    from a candidate it met); and the candidate's files whole, read this once (None: not read)."""
    key, kind, template = _group(request)
    context, workspace, known = request.body.get("context"), request.body.get("workspace"), key in seen
    files, unsent = (None, None) if known or not isinstance(workspace, str) else workspace_files(workspace)
    base, changed, deleted = seen.against(files) if files else (None, files, None)
    group = CandidateWork(candidate=key, kind=kind, workspace=workspace, files=changed, base=base, deleted=deleted,
                          unsent=unsent or None, context=None if known or context is None else str(context),
                          template=template, requests=[])
    return group, files


def _merged(work: HostWork, more: HostWork) -> HostWork:
    groups = {_group_of(group): group.model_copy(deep=True) for group in work.work}
    for group in more.work:
        if _group_of(group) in groups:
            groups[_group_of(group)].requests += group.requests
        else:
            groups[_group_of(group)] = group
    return work.model_copy(update={"work": list(groups.values()), "waiting": more.waiting})


def _request_bytes(request_id: str) -> int:
    """What a request adds to a page as sent, but its prompt's text: its fields and a comma."""
    return sent_bytes(HostRequest(request_id=request_id, prompt="", continues=True)) + 1


def cut_to(text: str, room: int) -> str:
    """The longest start of `text` whose JSON fits in `room` bytes."""
    if len(json.dumps(text)) <= room:
        return text
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if len(json.dumps(text[:mid])) <= room else (low, mid - 1)
    return text[:low]


def _lost(held: int) -> str:
    """What the answer says of the requests its holder took before and has not answered."""
    return (f"this conversation holds {held} request(s) it took before and has not answered: answer them, or if they "
            "are lost (a helper ended, a result was cut), host_release with the kind you work on gives them back"
            if held else "")


def _said(work: list[CandidateWork], waiting: int, running: bool, state: str, held: int) -> str:
    taken, lost = sum(len(group.requests) for group in work), _lost(held)
    if taken:
        more = f"; {waiting} more open: take them once these are answered" if waiting else ""
        return (f"{taken} request(s) on {len(work)} candidate(s): read each candidate once, do each task from its "
                f"files alone, and answer them all with host_submit{more}" + (f"; {lost}" if lost else ""))
    if not running:
        return f"the run is not running ({state}); there is nothing to do"
    if waiting:
        return (f"{waiting} request(s) open, held by another conversation until it answers or its lease ends"
                + (f"; {lost}" if lost else ""))
    return lost or "nothing to do yet: the run is measuring or deciding; ask again with wait"
