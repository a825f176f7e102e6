"""hf_rows against a loopback server that speaks the Hugging Face datasets-server API."""

from __future__ import annotations

import json
import threading
import time
import zlib
from types import SimpleNamespace

import pytest

from agentdescent.dataloader import hf_rows, huggingface, tasks_from
from agentdescent.errors import AgentDescentError, UserError
from agentdescent.types import Task
from tests.loopback import LoopbackServer, Request, Response, closed_port_url

TOKEN = "hf_secret_token_123"
DATASETS = {  # dataset -> config -> split -> rows
    "acme/qa": {"default": {
        "train": [{"q": f"question {i}", "a": i, "topic": f"t{i % 3}"} for i in range(250)],
        "test": [{"q": f"test {i}", "a": -i, "topic": "x"} for i in range(7)],
    }},
    "acme/long": {"default": {  # two cells too long for a page of several rows, one too long for any answer
        "train": [{"q": "short"}, {"q": "d" * 300}, {"q": "short too"}, {"q": "e" * 300}],
        "test": [{"q": "short"}, {"q": "f" * 6_000}],
    }},
    "acme/multi": {
        "small": {"validation": [{"q": "s"}]},
        "large": {"train": [{"q": "L"}], "validation": [{"q": "LV"}]},
    },
}


class FakeDatasetsServer:
    """The datasets-server `/splits` and `/rows` endpoints, with a request log and a queue of
    forced answers `(status, headers, body)` served before the normal ones (bytes: sent raw)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.forced: list[tuple[int, dict, object]] = []
        self.lock = threading.Lock()
        self.loopback = LoopbackServer(self.handle).start()
        self.url = self.loopback.url

    def handle(self, request: Request) -> Response:
        query = {key: values[0] for key, values in request.query.items()}
        with self.lock:
            self.requests.append({"path": request.path, "query": query,
                                  "auth": request.headers.get("authorization")})
            forced = self.forced.pop(0) if self.forced else None
        status, headers, body = forced or self.answer(request.path, query)
        if isinstance(body, bytes):
            headers = {"content-type": "text/html", **headers}
        return Response(status=status, headers=headers, body=body)

    def answer(self, path: str, query: dict) -> tuple[int, dict, object]:
        configs = DATASETS.get(query.get("dataset", ""))
        if configs is None:
            return 404, {}, {"error": "The dataset does not exist."}
        if path == "/splits":
            return 200, {}, {"splits": [
                {"dataset": query["dataset"], "config": c, "split": s}
                for c, splits in configs.items() for s in splits]}
        if path != "/rows":
            return 404, {}, {"error": "Not found."}
        rows = configs.get(query.get("config"), {}).get(query.get("split"))
        if rows is None:
            return 404, {}, {"error": "The config or split does not exist."}
        offset, length = int(query["offset"]), int(query["length"])
        if length > 100:
            return 422, {}, {"error": "length must be <= 100"}
        page = [_fitted(offset + i, row, alone=length == 1) for i, row in enumerate(rows[offset:offset + length])]
        return 200, {}, {"features": [], "rows": page, "num_rows_total": len(rows),
                         "num_rows_per_page": 100, "partial": False}

    def rows_requests(self) -> list[dict]:
        return [r["query"] for r in self.requests if r["path"] == "/rows"]


def _fitted(index: int, row: dict, *, alone: bool) -> dict:
    """A row as the datasets-server fits it into an answer: a cell too long for a page (or, alone,
    for any answer) becomes its first 100 characters, named in `truncated_cells`."""
    cut = [column for column, cell in row.items() if isinstance(cell, str) and len(cell) > (5_000 if alone else 200)]
    return {"row_idx": index, "row": {column: cell[:100] if column in cut else cell for column, cell in row.items()},
            "truncated_cells": cut}


@pytest.fixture(scope="module")
def server():
    fake = FakeDatasetsServer()
    yield fake
    fake.loopback.close()
    assert fake.loopback.errors == []


@pytest.fixture
def hub(server, tmp_path, monkeypatch, no_provider_env):
    """The fake server with a clean log; no token, no HF_ENDPOINT, the cache under tmp_path."""
    server.requests.clear()
    server.forced.clear()
    monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / "cache-root"))
    return server


def load(server, tmp_path, dataset="acme/qa", **kwargs):
    kwargs.setdefault("endpoint", server.url)
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("backoff", 0)
    return hf_rows(dataset, **kwargs)


# ---------------------------------------------------------------- hf_rows


def test_paginates_all_rows_in_pages_of_100(hub, tmp_path):
    rows = load(hub, tmp_path, config="default")
    assert rows == DATASETS["acme/qa"]["default"]["train"]
    pages = hub.rows_requests()
    assert [int(q["offset"]) for q in pages] == [0, 100, 200]
    assert all(int(q["length"]) <= 100 for q in pages)
    assert {(q["dataset"], q["config"], q["split"]) for q in pages} == {
        ("acme/qa", "default", "train")}


def test_limit_and_offset(hub, tmp_path):
    rows = load(hub, tmp_path, config="default", limit=130)
    assert len(rows) == 130 and rows[-1]["q"] == "question 129"
    pages = [(int(q["offset"]), int(q["length"])) for q in hub.rows_requests()]
    assert pages == [(0, 100), (100, 30)]
    tail = load(hub, tmp_path, config="default", offset=240, cache=False)
    assert [r["a"] for r in tail] == list(range(240, 250))


def test_config_is_discovered_through_splits(hub, tmp_path):
    assert load(hub, tmp_path, split="test") == DATASETS["acme/qa"]["default"]["test"]
    assert hub.requests[0]["path"] == "/splits"
    assert load(hub, tmp_path, "acme/multi", split="train") == [{"q": "L"}]
    assert hub.rows_requests()[-1]["config"] == "large"  # the first config that has "train"
    assert load(hub, tmp_path, "acme/multi", split="validation") == [{"q": "s"}]


def test_hf_endpoint_env_is_read_at_call_time(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url + "/")
    rows = hf_rows("acme/qa", "test", cache_dir=tmp_path / "c", backoff=0)
    assert len(rows) == 7 and len(hub.requests) == 2


def test_token_is_sent_as_bearer_and_never_cached(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    load(hub, tmp_path, split="test")
    assert {r["auth"] for r in hub.requests} == {f"Bearer {TOKEN}"}
    files = list((tmp_path / "cache").iterdir())
    assert len(files) == 2  # the /splits answer and one page
    assert all(TOKEN not in f.read_text() for f in files)


def test_cache_hit_makes_no_request(hub, tmp_path):
    first = load(hub, tmp_path, limit=130)
    count = len(hub.requests)
    assert count == 3  # /splits + two pages
    assert load(hub, tmp_path, limit=130) == first
    assert len(hub.requests) == count
    load(hub, tmp_path, limit=130, cache=False)
    assert len(hub.requests) == 2 * count


def test_default_cache_dir_comes_from_agentdescent_cache(hub, tmp_path):
    hf_rows("acme/qa", "test", config="default", endpoint=hub.url)
    assert len(list((tmp_path / "cache-root" / "hf_rows").glob("*.json"))) == 1


def test_unknown_dataset(hub, tmp_path):
    with pytest.raises(UserError, match="acme/nope") as info:
        load(hub, tmp_path, "acme/nope")
    assert "huggingface.co/datasets" in str(info.value)
    with pytest.raises(UserError, match="acme/nope"):  # config given: the /rows 404 is diagnosed
        load(hub, tmp_path, "acme/nope", config="default")


def test_unknown_split_lists_the_splits(hub, tmp_path):
    with pytest.raises(UserError, match="validaton") as info:
        load(hub, tmp_path, split="validaton")
    assert "train" in str(info.value) and "test" in str(info.value)
    with pytest.raises(UserError, match="validaton") as info:
        load(hub, tmp_path, split="validaton", config="default")
    assert "train" in str(info.value) and "test" in str(info.value)


def test_unknown_config_lists_the_configs(hub, tmp_path):
    with pytest.raises(UserError, match="'medium'") as info:
        load(hub, tmp_path, "acme/multi", config="medium")
    assert "large" in str(info.value) and "small" in str(info.value)


@pytest.fixture
def sleeps(monkeypatch):
    """The waits hf_rows asks for, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(huggingface, "time", SimpleNamespace(sleep=waits.append, monotonic=time.monotonic))
    return waits


def test_429_is_retried_honouring_retry_after(hub, tmp_path, sleeps):
    hub.forced.append((429, {"Retry-After": "0"}, {"error": "slow down"}))
    assert len(load(hub, tmp_path, split="test", config="default", backoff=5)) == 7
    assert len(hub.requests) == 2 and sleeps == [0.0]
    hub.forced.append((429, {"Retry-After": "2.5"}, {"error": "slow down"}))
    hub.forced.append((500, {}, {"error": "oops"}))
    load(hub, tmp_path, split="test", config="default", backoff=0.25, cache=False)
    assert sleeps == [0.0, 2.5, 0.5]  # Retry-After, else backoff * 2**attempt


def test_persistent_503_is_an_error_after_the_retries(hub, tmp_path, sleeps):
    hub.forced.extend([(503, {}, {"error": "down"})] * 10)
    with pytest.raises(AgentDescentError, match="503") as info:
        load(hub, tmp_path, config="default", retries=2)
    assert not isinstance(info.value, UserError)
    assert len(hub.requests) == 3 and len(sleeps) == 2
    assert not (tmp_path / "cache").exists()  # failures are not cached


def test_an_endpoint_without_the_api_is_named(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.forced.append((404, {}, b"<html>Not Found</html>"))
    with pytest.raises(AgentDescentError, match="HF_ENDPOINT") as info:
        hf_rows("acme/qa", cache_dir=tmp_path / "c")
    assert hub.url in str(info.value) and "datasets-server API" in str(info.value)


def test_a_corrupt_cache_file_is_fetched_again(hub, tmp_path):
    first = load(hub, tmp_path, split="test", config="default")
    (page,) = (tmp_path / "cache").glob("rows-*.json")
    page.write_text("{not json")
    assert load(hub, tmp_path, split="test", config="default") == first
    assert len(hub.requests) == 2 and json.loads(page.read_text())["answer"]["num_rows_total"] == 7


def test_401_says_gated_and_hf_token(hub, tmp_path, monkeypatch):
    hub.forced.append((401, {}, {"error": "unauthorized"}))
    with pytest.raises(UserError, match="gated") as info:
        load(hub, tmp_path, config="default")
    assert "HF_TOKEN" in str(info.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.forced.append((403, {}, {"error": "forbidden"}))
    with pytest.raises(UserError, match="HF_TOKEN") as info:
        load(hub, tmp_path, config="default")
    assert TOKEN not in str(info.value)


def test_unreachable_endpoint_is_named(hub, tmp_path, sleeps):
    dead = closed_port_url()
    with pytest.raises(AgentDescentError, match="could not reach") as info:
        load(hub, tmp_path, endpoint=dead, retries=1)
    assert dead in str(info.value)


def test_bad_limit_is_a_user_error(hub, tmp_path):
    with pytest.raises(UserError, match="limit"):
        load(hub, tmp_path, limit=-1)
    assert hub.requests == []


def test_a_row_cut_short_to_fit_its_page_is_asked_for_again_alone(hub, tmp_path):
    """The server cuts a long cell to 100 characters to fit a page of rows; a task made of that
    would hold the wrong prompt or gold answer."""
    rows = load(hub, tmp_path, dataset="acme/long", config="default")
    assert rows == DATASETS["acme/long"]["default"]["train"]
    assert [(int(q["offset"]), int(q["length"])) for q in hub.rows_requests()] == [(0, 100), (1, 1), (3, 1)]


def test_a_row_cut_short_even_alone_is_refused_with_the_way_out(hub, tmp_path):
    with pytest.raises(UserError, match=r"row 1 of 'acme/long' \(default/test\).*cells «q» cut short.*jsonl_rows"):
        load(hub, tmp_path, dataset="acme/long", config="default", split="test")


def test_truncated_cells_that_are_no_list_of_names_is_not_the_api(hub, tmp_path):
    page = {"rows": [{"row_idx": 0, "row": {"q": "x"}, "truncated_cells": "q"}], "num_rows_total": 1}
    hub.forced.append((200, {}, page))
    with pytest.raises(AgentDescentError, match="a string for 'truncated_cells', not a list of column names"):
        load(hub, tmp_path, config="default", cache=False)


def test_end_to_end_hf_rows_to_tasks(hub, tmp_path):
    tasks = tasks_from(load(hub, tmp_path, split="test"), prompt="Answer: {q}", gold="a",
                       id=lambda r: f"qa-{r['a']}", meta=["topic"])
    assert len(tasks) == 7 and tasks[1] == Task(id="qa--1", prompt="x")
    assert tasks[1].prompt == "Answer: test 1" and tasks[1].gold == "-1"


# ---------------------------------------------------------------- a hostile server

def test_a_server_sending_a_byte_now_and_then_is_cut_off_at_the_timeout(tmp_path):
    """httpx's timeout bounds each read; one byte every half second would go on for minutes."""
    dripping = Response(body={"splits": [{"config": "default", "split": "train"}], "pad": "x" * 400}, trickle=0.5)
    with LoopbackServer(lambda request: dripping) as server, \
            pytest.raises(AgentDescentError, match=r"could not reach .* after 2 attempts: .*Timeout"):
        hf_rows("acme/qa", endpoint=server.url, cache=False, timeout=1, retries=1, backoff=0)
    assert len(server.requests) == 2


def test_rows_that_never_end_stop_at_the_byte_cap(tmp_path):
    def page(request):  # new rows on every page, and no num_rows_total
        start = int(request.query["offset"][0])
        return Response(body={"rows": [{"row_idx": start + i, "row": {"q": "x" * 1000}} for i in range(100)]})

    with LoopbackServer(page) as server, \
            pytest.raises(UserError, match=r"passed 1,000,000 bytes.*tasks.limit in a spec"):
        hf_rows("acme/qa", config="default", endpoint=server.url, cache=False, max_bytes=1_000_000)
    assert len(server.requests) <= 11


def test_a_compressed_answer_is_capped_as_it_inflates(tmp_path):
    bomb = zlib.compressobj(wbits=31)
    body = bomb.compress(b'{"splits": [], "pad": "' + b"x" * 50_000_000) + bomb.flush()
    answer = Response(headers={"content-encoding": "gzip", "content-type": "application/json"}, body=body)
    with LoopbackServer(lambda request: answer) as server, pytest.raises(UserError, match="passed 1,000,000 bytes"):
        hf_rows("acme/qa", endpoint=server.url, cache=False, max_bytes=1_000_000)
