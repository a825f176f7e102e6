"""Rows of a Hugging Face dataset, read through the datasets-server HTTP API.

`hf_rows` asks `/splits` for the config when none is given, then reads `/rows` page by page
(at most 100 rows a request), with retries on 429, 5xx and network failures, and keeps every
page in an on-disk cache so that a second call makes no request. The server is hostile until
checked, as a tasks file is: each request ends within its timeout however the server sends
(a byte now and then does not keep it going), the answers together are read up to the
tasks file's byte cap, compressed or not, each answer's shape is checked before it is used or
cached (`hf_answers`), and pages that never end are stopped. A row whose cells the server cut short
to fit a page (`truncated_cells`) is asked for again alone, and refused if it is still cut. Left out: the `datasets`
library and Parquet/Arrow downloads (the rows API needs only `httpx`), streaming, and
image/audio cells (they arrive as whatever JSON the server sends).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdescent.agents.deadline import Deadline, bound_every_socket
from agentdescent.agents.endpoint import join_url, public, read_key, url_secrets
from agentdescent.agents.redact import guard_logging, redact
from agentdescent.agents.replies import inflated, inflater_for
from agentdescent.agents.waits import retry_after_seconds
from agentdescent.dataloader.hf_answers import problem, read_cached, redacted, write_cached
from agentdescent.dataloader.local import MAX_FILE_BYTES, unwrap_row
from agentdescent.errors import AgentDescentError, UserError
from agentdescent.quoting import quoted

DEFAULT_ENDPOINT = "https://datasets-server.huggingface.co"
PAGE_SIZE = 100  # the most rows the datasets-server /rows endpoint returns per request
_MAX_WAIT = 60.0  # never sleep longer than this on one Retry-After
# Bytes a full page of the smallest rows the API sends (`{"row_idx":N,"row":{},"truncated_cells":[]}` a
# hundred times) passes: the byte cap over it bounds the pages a server that never ends may make us ask for.
_PAGE_FLOOR = 4_000


def hf_rows(dataset: str, split: str = "train", *, config: str | None = None,
            limit: int | None = None, offset: int = 0, endpoint: str | None = None,
            cache_dir: str | os.PathLike | None = None, timeout: float = 30,
            cache: bool = True, retries: int = 3, backoff: float = 0.5,
            max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """The rows (`rows[i]["row"]` dicts) of `dataset`/`config`/`split` from `offset`, at most
    `limit` (None: all), fetched in pages of at most 100 until `limit` or `num_rows_total`.

    `config=None` takes the first config that has `split` in `/splits` ("default" if none is
    listed). The server is `endpoint`, else env `HF_ENDPOINT` (read at call time), else
    https://datasets-server.huggingface.co; it must speak the datasets-server API (`/splits`,
    `/rows`), e.g. a mirror or proxy of it. Unlike in `huggingface_hub`, HF_ENDPOINT here is
    not the Hub. A user name or password in the endpoint is refused; a key in its query is sent
    but never shown (messages show the endpoint as `agents.endpoint.public` does). Env `HF_TOKEN`
    (read at call time, stripped) goes out as `Authorization: Bearer ...` and never into errors
    or cache files: what a server answers reaches a message or the cache only through
    `agentdescent.agents.redact.redact`.

    Every page and the `/splits` answer are cached as JSON under `cache_dir` (default
    `$AGENTDESCENT_CACHE/hf_rows`, else `~/.cache/agentdescent/hf_rows`), keyed by endpoint,
    dataset, config, split, offset and length: a repeated call makes no request. `cache=False`
    skips the cache. 429, 5xx and network failures are retried `retries` times after
    Retry-After seconds when sent, else `backoff * 2**attempt`. Each request ends within
    `timeout` seconds, its whole answer read; the answers together, cached ones too (counted as
    the bytes the server sent), may hold at most `max_bytes` bytes (a tasks file's cap: past it,
    ask for fewer rows with `limit`).

    Raises UserError for an unknown dataset, config or split (listing what exists), a 401/403
    (gated: set HF_TOKEN), a bad endpoint, an HF_TOKEN no header can carry, or a row the server
    cuts short even when it is asked for alone (`truncated_cells`); AgentDescentError
    when the server stays down or unreachable, or does not speak the API (an answer of the wrong
    shape, a redirect loop, a page of rows already sent, more pages than the byte cap holds).
    """
    if (limit is not None and limit < 0) or offset < 0:
        raise UserError(f"hf_rows: limit and offset must be >= 0 (limit={limit}, offset={offset})")
    base, source = _endpoint(endpoint)
    folder = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    guard_logging()
    token = _token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    import httpx  # here, not at the top: a run that loads no dataset never pays for it

    headers["Accept-Encoding"] = "gzip, deflate"  # the codings `_read` inflates within the cap
    with httpx.Client(headers=headers, timeout=timeout, follow_redirects=True) as client:
        clock = Deadline()
        bound_every_socket(client, clock)
        hub = _Hub(client, base, source, dataset, folder if cache else None, retries, backoff, clock, timeout,
                   max_bytes, token is not None)
        try:
            if config is None:
                config = _pick_config(hub.splits(), dataset, split)
            return _paginate(hub, config, split, offset, limit)
        except AgentDescentError as exc:  # the endpoint's password or key, quoted back by a server, stays out
            clean = redact(str(exc), hub.secrets)
            if clean == str(exc):
                raise
            raise type(exc)(clean) from None


def _endpoint(endpoint: str | None) -> tuple[str, str]:
    """The endpoint to use, checked, and where it came from (for messages). A user name or password
    in it is refused: httpx would send them as Basic auth in place of HF_TOKEN."""
    import httpx

    given, source = (endpoint, "endpoint=") if endpoint else (os.environ.get("HF_ENDPOINT", ""), "HF_ENDPOINT")
    text = given.strip()
    if not text:
        return DEFAULT_ENDPOINT, "default"
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise UserError(redact(f"{source} {public(text)!r} is no URL ({exc}); it looks like {DEFAULT_ENDPOINT}",
                               url_secrets(text))) from None
    if url.scheme not in ("http", "https") or not url.host:
        raise UserError(f"{source} {public(text)!r} needs http:// or https:// and a host, like {DEFAULT_ENDPOINT}")
    if url.userinfo:
        raise UserError(f"{source} {public(text)!r} carries a user name or password (user:pw@host), which would "
                        "be sent in place of HF_TOKEN: take them out (a proxy's go in HTTPS_PROXY)")
    return text.rstrip("/") if not url.query else text, source


def _token() -> str | None:
    """HF_TOKEN now, stripped (a token read from a file ends in a newline); None when unset. One
    holding what no header can carry is refused (`read_key`): sent, it would fail every attempt."""
    if not os.environ.get("HF_TOKEN", "").strip():
        return None
    return read_key("HF_TOKEN", "hf_rows")


def _default_cache_dir() -> Path:
    root = os.environ.get("AGENTDESCENT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "agentdescent") / "hf_rows"


def _pick_config(entries: list[dict], dataset: str, split: str) -> str:
    for entry in entries:
        if entry["split"] == split:
            return entry["config"]
    if not entries:
        return "default"
    raise UserError(f"dataset {dataset!r} has no split {split!r}; available: {_listing(entries)}")


def _listing(entries: list[dict]) -> str:
    return ", ".join(f"{e['split']} (config {e['config']!r})" for e in entries)


def _paginate(hub: _Hub, config: str, split: str, offset: int, limit: int | None) -> list[dict]:
    """The rows from `offset`, page by page, until `limit`, `num_rows_total` or an empty page. A
    server whose pages never end is stopped: a page must bring a row index not seen before, and
    there are at most as many pages as the byte cap holds full pages of the smallest rows."""
    rows: list[dict] = []
    seen: set[int] = set()
    pages = 0
    while limit is None or len(rows) < limit:
        pages += 1
        if pages > max(1, hub.cap // _PAGE_FLOOR):
            raise hub.not_the_api(f"more than {pages - 1:,} pages for {hub.cap:,} bytes, each of a few rows")
        length = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - len(rows))
        page = hub.rows(config, split, offset, length)
        items = page["rows"]
        if not items:
            break
        indexes = {item["row_idx"] for item in items if "row_idx" in item}
        if indexes and indexes <= seen:
            raise hub.not_the_api(f"the page at offset {offset:,} repeats rows already sent (row_idx {min(indexes):,})")
        seen |= indexes
        rows.extend(_whole(hub, config, split, item) for item in items)
        offset += len(items)
        total = page.get("num_rows_total")
        if total is not None and offset >= total:
            break
    return rows


def _whole(hub: _Hub, config: str, split: str, item: dict) -> dict:
    """`item`'s row, asked for again alone where the server cut cells of it short to fit its page
    into the answer's size (it names them in `truncated_cells`: each became a string of a few
    bytes); a row still cut short alone is refused, since a task made of it would be wrong."""
    cut = item.get("truncated_cells")
    if not cut:
        return unwrap_row(item)
    index = item.get("row_idx")
    if index is not None:
        alone = hub.rows(config, split, index, 1)["rows"]
        if alone and not alone[0].get("truncated_cells"):
            return unwrap_row(alone[0])
        cut = alone[0].get("truncated_cells") if alone else cut
    where = f"row {index:,}" if index is not None else "a row"
    raise UserError(f"{where} of {hub.dataset!r} ({config}/{split}) comes from {hub.shown} with the cells "
                    f"{', '.join(quoted(c, 80) for c in cut[:5])} cut short, even asked for alone (the datasets-server "
                    "cuts the cells of a row too large for one answer): a task made of it would hold a few bytes "
                    "of them. Read the split from its file instead (download it, then jsonl_rows or a tasks file), "
                    "or pass offset= and limit= that leave this row out")


class _Refused(Exception):
    """A definitive error answer (`status`, server message), for the caller to explain."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Hub:
    """One hf_rows call: the httpx client (carrying the token), endpoint, cache, retry policy."""

    client: Any
    base: str
    source: str  # where `base` came from, for error messages
    dataset: str
    cache_dir: Path | None
    retries: int
    backoff: float
    clock: Deadline  # bounds each request's socket waits to its `timeout`
    timeout: float
    cap: int  # bytes the answers may hold together
    token: bool  # whether HF_TOKEN was sent
    left: int = field(init=False)  # bytes they may still hold
    shown: str = field(init=False)  # the endpoint as messages show it: no password, no query
    secrets: dict[str, str] = field(init=False)  # what of the endpoint `redact` hides (its `env=`)

    def __post_init__(self) -> None:
        self.left, self.shown, self.secrets = self.cap, public(self.base), url_secrets(self.base)

    def splits(self) -> list[dict]:
        """The `/splits` entries; an unknown dataset raises UserError."""
        try:
            return self.get("splits", {"dataset": self.dataset})["splits"]
        except _Refused as refused:
            raise UserError(
                f"dataset {self.dataset!r} not found at {self.shown} (HTTP {refused.status}: "
                f"{refused}); check the name at https://huggingface.co/datasets/{self.dataset} "
                "(a private or gated dataset also needs HF_TOKEN)") from None

    def rows(self, config: str, split: str, offset: int, length: int) -> dict:
        """One `/rows` page; a refusal is explained through `/splits` (dataset, config, split)."""
        params = {"dataset": self.dataset, "config": config, "split": split,
                  "offset": offset, "length": length}
        try:
            return self.get("rows", params)
        except _Refused as refused:
            entries = self.splits()
            configs = sorted({e["config"] for e in entries})
            if entries and config not in configs:
                raise UserError(f"dataset {self.dataset!r} has no config {config!r}; "
                                f"available configs: {', '.join(configs)}") from None
            splits = {e["split"] for e in entries if e["config"] == config}
            if entries and split not in splits:
                raise UserError(f"dataset {self.dataset!r} config {config!r} has no split "
                                f"{split!r}; available: {_listing(entries)}") from None
            raise UserError(f"{self.shown}/rows refused {params} (HTTP {refused.status}): "
                            f"{refused}") from None

    def get(self, route: str, params: dict) -> dict:
        """The JSON answer of `route`, from the cache when it holds it, else fetched, checked and cached."""
        key = json.dumps([self.base, route, sorted(params.items())], default=str)
        name = f"{route}-{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"
        path = self.cache_dir / name if self.cache_dir else None
        cached = read_cached(path, route, params, self.cap) if path else None
        if cached is not None:
            self._count(cached[1])  # what the server sent for it, as when it was fetched
            return cached[0]
        response, content = self._send(join_url(self.base, route), params)
        body = self._decode(response, content)
        wrong = problem(route, params, body)
        if wrong is not None:
            raise self.not_the_api(f"in its /{route} answer, {wrong}")
        body, text = redacted(body, self.secrets)
        if path:
            write_cached(path, text, len(content))
        return body

    def not_the_api(self, what: str) -> AgentDescentError:
        """The error for an answer no datasets-server sends: `what` it did, by its JSON types alone."""
        return AgentDescentError(
            f"the endpoint {self.shown} (from {self.source}) does not answer as the Hugging Face datasets-server "
            f"API does: {what}; set endpoint= / HF_ENDPOINT to {DEFAULT_ENDPOINT} or a mirror or proxy of it")

    def _decode(self, response: Any, content: bytes) -> dict:
        url = public(str(response.request.url))
        if response.status_code in (401, 403):
            token = "HF_TOKEN (now set but refused)" if self.token else "HF_TOKEN"
            raise UserError(
                f"{url} refused dataset {self.dataset!r} (HTTP {response.status_code}): it may be "
                f"gated or private; accept its terms at https://huggingface.co/datasets/"
                f"{self.dataset}, then set {token} to a token with access")
        try:
            body = json.loads(content)
        except (ValueError, RecursionError):
            raise AgentDescentError(
                f"{url} answered HTTP {response.status_code} without JSON; the endpoint "
                f"{self.shown} (from {self.source}) must speak the Hugging Face datasets-server API "
                f"(/splits, /rows), e.g. {DEFAULT_ENDPOINT} or a mirror or proxy of it") from None
        if response.status_code >= 400 or not isinstance(body, dict) or "error" in body:
            message = body.get("error") if isinstance(body, dict) else None
            raise _Refused(response.status_code, redact(str(message or body), self.secrets)[:300])
        if response.status_code >= 300:  # a redirect httpx could not follow: it named no place
            raise self.not_the_api(f"{url} answered HTTP {response.status_code} with no Location")
        return body

    def _send(self, url: str, params: dict) -> tuple[Any, bytes]:
        """GET `url` with `params` added to its query (a key the endpoint carries stays), with retries
        on 429, 5xx and network failures; any other answer is returned, with its body."""
        import httpx

        full = httpx.URL(url).copy_merge_params(params)  # httpx's `params=` would replace the endpoint's query

        for attempt in range(self.retries + 1):
            wait, last = self.backoff * 2**attempt, attempt == self.retries
            self.clock.at = time.monotonic() + self.timeout
            try:
                with self.client.stream("GET", full) as response:
                    content = self._read(response)
            except httpx.TransportError as exc:  # a timeout too: the request's time ran out
                if last:
                    raise AgentDescentError(
                        redact(f"could not reach {self.shown} (from {self.source}) after {attempt + 1} "
                               f"attempts: {type(exc).__name__}: {exc}; check the network, or set "
                               "endpoint= / HF_ENDPOINT to a datasets-server API", self.secrets)) from None
                time.sleep(wait)
                continue
            except (httpx.TooManyRedirects, httpx.InvalidURL) as exc:  # the server's doing: retrying changes nothing
                raise self.not_the_api(redact(f"its redirects went wrong ({type(exc).__name__}: {exc})",
                                              self.secrets)) from None
            finally:
                self.clock.at = None
            if response.status_code != 429 and response.status_code < 500:
                return response, content
            if last:
                said = redact(content[:2000].decode("utf-8", "replace"), self.secrets)[:200]
                raise AgentDescentError(
                    f"{public(url)} still answered HTTP {response.status_code} after {attempt + 1} "
                    f"attempts ({said!r}); the server is busy or down, try later")
            asked = retry_after_seconds(response.headers.get("Retry-After"), cap=_MAX_WAIT)
            time.sleep(wait if asked is None else asked)
        raise AssertionError("unreachable")

    def _read(self, response: Any) -> bytes:
        """The answer's bytes, inflated a block at a time where compressed; an error once the
        answers together pass the byte cap."""
        coding = response.headers.get("content-encoding", "")
        try:
            inflater = inflater_for(coding)
        except ValueError:
            raise AgentDescentError(f"{self.shown} sent its answer {coding[:40]!r}-encoded, which is not read (asked "
                                    "for gzip or deflate); the endpoint must speak the datasets-server API") from None
        chunks = []
        try:
            for chunk in inflated(response.iter_raw(), inflater):
                self._count(len(chunk))
                chunks.append(chunk)
        except zlib.error as exc:
            raise AgentDescentError(f"{self.shown} sent a {coding} answer that does not inflate ({exc})") from None
        return b"".join(chunks)

    def _count(self, size: int) -> None:
        """Take `size` bytes of an answer off what the answers may still hold; an error past the cap."""
        self.left -= size
        if self.left < 0:
            raise UserError(f"dataset {self.dataset!r} from {self.shown} passed {self.cap:,} bytes, the most "
                            "read of a dataset (as of a tasks file); ask for fewer rows (tasks.limit in a "
                            "spec, limit= to hf_rows), or pass max_bytes= to hf_rows for more")
