"""hf_rows against endpoints and caches that do not behave: secrets in the endpoint, pages that
never end, answers of the wrong shape, a token as people paste it, a cache file that is no file,
redirect loops, a mirror that echoes the request. Every server is on loopback."""

from __future__ import annotations

import json
import os
import threading

import pytest

from agentdescent.dataloader import hf_rows
from agentdescent.errors import AgentDescentError, UserError
from tests.loopback import LoopbackServer, Request, Response

SECRET = "S3cretMirrorPassw0rd9876"
TOKEN = "hf_QwErTy0123456789AbCdEfGhIjKlMnOpQr"
SPLITS = {"splits": [{"dataset": "acme/x", "config": "default", "split": "train"}]}
NOT_THE_API = "does not answer as the Hugging Face datasets-server API does"


def dataset(rows: list[dict], **extra: object):
    """A handler serving `rows` as the datasets-server does, `extra` added to every answer."""
    def handle(request: Request) -> Response:
        if request.path == "/splits":
            return Response(body={**SPLITS, **extra})
        start, length = int(request.query["offset"][0]), int(request.query["length"][0])
        page = [{"row_idx": start + i, "row": row, "truncated_cells": []} for i, row in enumerate(rows[start:start + length])]
        return Response(body={"rows": page, "num_rows_total": len(rows), **extra})
    return handle


@pytest.fixture(autouse=True)
def clean_env(no_provider_env, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / "cache-root"))


# ---------------------------------------------------------------- a secret in the endpoint

ANSWERS = {
    "404": lambda request: Response(status=404, body={"error": f"no such dataset at {request.path}?{request.query}"}),
    "401": lambda request: Response(status=401, body={"error": "no"}),
    "503": lambda request: Response(status=503, body={"error": f"down, asked {request.query}"}),
    "html": lambda request: Response(body=b"<html>hi</html>", headers={"content-type": "text/html"}),
}


@pytest.mark.parametrize("answer", ANSWERS)
def test_a_key_in_the_endpoint_query_is_never_shown(answer, monkeypatch):
    with LoopbackServer(ANSWERS[answer]) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"{server.url}/?api_key={SECRET}")
        with pytest.raises(AgentDescentError) as info:
            hf_rows("acme/x", cache=False, retries=0, backoff=0)
    assert SECRET not in str(info.value) and server.url in str(info.value)


def test_a_key_in_the_endpoint_query_is_sent_with_each_route(tmp_path):
    with LoopbackServer(dataset([{"q": "a"}])) as server:
        assert hf_rows("acme/x", endpoint=f"{server.url}/?api_key={SECRET}", cache_dir=tmp_path) == [{"q": "a"}]
    assert [r.path for r in server.requests] == ["/splits", "/rows"]
    assert all(r.query["api_key"] == [SECRET] for r in server.requests)


def test_a_password_in_the_endpoint_is_refused(monkeypatch):
    with LoopbackServer(ANSWERS["404"]) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url.replace("//", f"//mirror:{SECRET}@"))
        with pytest.raises(UserError, match="HF_ENDPOINT .*user name or password") as info:
            hf_rows("acme/x", cache=False, retries=0)
    assert SECRET not in str(info.value) and server.requests == []


@pytest.mark.parametrize("value", ["http://[::1", "localhost:8080", "http://h\nx.com"])
def test_an_endpoint_that_is_no_url_is_a_user_error(value, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", value)
    with pytest.raises(UserError, match="HF_ENDPOINT"):
        hf_rows("acme/x", cache=False, retries=0)


def test_an_endpoint_with_a_trailing_newline_is_used(tmp_path, monkeypatch):
    with LoopbackServer(dataset([{"q": "a"}])) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url + "/\n")
        assert hf_rows("acme/x", cache_dir=tmp_path) == [{"q": "a"}]


def test_a_redirect_loop_is_named(tmp_path):
    loop = LoopbackServer(lambda request: Response(status=302, headers={"location": request.path + "?again=1"}))
    with loop as server, pytest.raises(AgentDescentError, match=f"{NOT_THE_API}.*TooManyRedirects") as info:
        hf_rows("acme/x", endpoint=f"{server.url}?key={SECRET}", cache=False, retries=0)
    assert server.url in str(info.value) and SECRET not in str(info.value)


# ---------------------------------------------------------------- pages that never end

def test_pages_of_rows_already_sent_stop_at_once(tmp_path):
    page = {"rows": [{"row_idx": 0, "row": {"q": "x"}}], "num_rows_total": 10**12}
    handler = LoopbackServer(lambda request: Response(body=SPLITS if request.path == "/splits" else page))
    with handler as server, pytest.raises(AgentDescentError, match=f"{NOT_THE_API}.*row_idx 0") as info:
        hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path, max_bytes=100_000)
    assert server.url in str(info.value) and len(server.requests) == 3
    assert len(list(tmp_path.iterdir())) == 2  # the page it stopped at is not cached


def test_a_row_index_seen_before_stops(tmp_path):
    def handle(request):  # each page in its range, but the same row again at every offset
        start = int(request.query.get("offset", ["0"])[0])
        return Response(body=SPLITS if request.path == "/splits" else
                        {"rows": [{"row_idx": 50, "row": {"q": "x"}}], "num_rows_total": 10**12} if start <= 50 else {"rows": []})
    with LoopbackServer(handle) as server, pytest.raises(AgentDescentError, match="repeats rows already sent"):
        hf_rows("acme/x", endpoint=server.url, cache=False, max_bytes=100_000)
    assert len(server.requests) == 3


def test_one_new_row_a_page_stops_within_the_page_bound():
    def handle(request):
        start = int(request.query.get("offset", ["0"])[0])
        return Response(body=SPLITS if request.path == "/splits" else
                        {"rows": [{"row_idx": start, "row": {}}], "num_rows_total": 10**12})
    with LoopbackServer(handle) as server, pytest.raises(AgentDescentError, match=f"{NOT_THE_API}.*pages"):
        hf_rows("acme/x", endpoint=server.url, cache=False, max_bytes=400_000)
    assert len(server.requests) <= 101  # /splits, and 400,000 bytes over a full page of the smallest rows


def test_rows_as_an_object_stop_at_once():
    handler = LoopbackServer(lambda request: Response(body=SPLITS if request.path == "/splits" else {"rows": {"a": 1}}))
    with handler as server, pytest.raises(AgentDescentError, match=f"{NOT_THE_API}.*'rows' is an object"):
        hf_rows("acme/x", endpoint=server.url, cache=False, max_bytes=100_000)
    assert len(server.requests) == 2


# ---------------------------------------------------------------- answers of the wrong shape

SHAPES = {
    "rows is a number": (SPLITS, {"rows": 5}),
    "num_rows_total is a string": (SPLITS, {"rows": [{"row_idx": 0, "row": {"q": 1}}], "num_rows_total": "7"}),
    "a row is no object": (SPLITS, {"rows": [1, 2], "num_rows_total": 2}),
    "splits is a list of strings": ({"splits": ["train"]}, {"rows": []}),
    "a split without its config": ({"splits": [{"split": "train"}]}, {"rows": []}),
    "splits is a number": ({"splits": 3}, {"rows": []}),
}


@pytest.mark.parametrize("case", SHAPES)
def test_an_answer_of_the_wrong_shape_is_named(case):
    splits, rows = SHAPES[case]
    handler = LoopbackServer(lambda request: Response(body=splits if request.path == "/splits" else rows))
    with handler as server, pytest.raises(AgentDescentError, match=NOT_THE_API) as info:
        hf_rows("acme/x", endpoint=server.url, cache=False, retries=0)
    assert server.url in str(info.value)


def test_a_malformed_page_is_not_cached(tmp_path):
    bad = [True]
    def handle(request):
        total = "1" if bad[0] else 1
        return Response(body=SPLITS if request.path == "/splits" else
                        {"rows": [{"row_idx": 0, "row": {"q": "x"}}], "num_rows_total": total})
    with LoopbackServer(handle) as server:
        with pytest.raises(AgentDescentError, match=NOT_THE_API):
            hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path)
        bad[0] = False
        assert hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path) == [{"q": "x"}]
        assert hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path) == [{"q": "x"}]
    assert [r.path for r in server.requests] == ["/splits", "/rows", "/rows"]


# ---------------------------------------------------------------- the cache

def test_a_non_ascii_dataset_reads_from_the_cache_as_it_did_from_the_server(tmp_path):
    rows = [{"q": "问题" * 2000, "a": str(i)} for i in range(150)]  # 1.8 MB as UTF-8, twice that as escapes
    def handle(request):  # the server's own JSON: characters as UTF-8, not as escapes
        answer = dataset(rows)(request)
        return Response(body=json.dumps(answer.body, ensure_ascii=False), headers={"content-type": "application/json"})
    with LoopbackServer(handle) as server:
        first = hf_rows("acme/zh", endpoint=server.url, cache_dir=tmp_path, max_bytes=2_000_000)
        assert hf_rows("acme/zh", endpoint=server.url, cache_dir=tmp_path, max_bytes=2_000_000) == first == rows
    assert len(server.requests) == 3
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) < 2_000_000


def test_a_lone_surrogate_is_cached_and_read_back(tmp_path):
    with LoopbackServer(dataset([{"q": "a\ud800b"}])) as server:
        first = hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path)
        assert hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path) == first == [{"q": "a\ud800b"}]
    assert len(server.requests) == 2


def cache_file(folder, route="rows"):
    (path,) = folder.glob(f"{route}-*.json")
    return path


def test_a_fifo_in_place_of_a_cache_file_is_fetched_again(tmp_path):
    with LoopbackServer(dataset([{"q": "a"}])) as server:
        hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path)
        page = cache_file(tmp_path)
        page.unlink()
        os.mkfifo(page)
        done: list = []
        reader = threading.Thread(target=lambda: done.append(hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path)),
                                  daemon=True)
        reader.start()
        reader.join(10)
        if reader.is_alive():  # let the hung reader go before failing
            os.close(os.open(page, os.O_WRONLY | os.O_NONBLOCK))
        assert done == [[{"q": "a"}]]
    assert len(server.requests) == 3 and page.is_file()


def test_a_symlink_in_place_of_a_cache_file_is_not_followed(tmp_path):
    with LoopbackServer(dataset([{"q": "a"}])) as server:
        hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path / "c")
        page = cache_file(tmp_path / "c")
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps({"sent": 10, "answer": {"rows": [{"row_idx": 0, "row": {"q": "forged"}}]}}))
        page.unlink()
        page.symlink_to(forged)
        assert hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path / "c") == [{"q": "a"}]
    assert len(server.requests) == 3 and not page.is_symlink()


def test_a_mirror_echoing_the_token_leaves_it_out_of_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    def handle(request):
        answer = dataset([{"q": "a"}])(request)
        return Response(body={**answer.body, "debug": {"request_headers": dict(request.headers)}})
    with LoopbackServer(handle) as server:
        assert hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path) == [{"q": "a"}]
        assert hf_rows("acme/x", endpoint=server.url, cache_dir=tmp_path) == [{"q": "a"}]
    assert len(server.requests) == 2
    texts = [f.read_text() for f in tmp_path.iterdir()]
    assert len(texts) == 2 and all(TOKEN not in t and "[redacted HF_TOKEN]" in t for t in texts)


# ---------------------------------------------------------------- HF_TOKEN as pasted

@pytest.mark.parametrize("pasted", [TOKEN + "\n", TOKEN + "\r\n", " " + TOKEN])
def test_a_token_with_spaces_around_it_is_sent_stripped(pasted, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", pasted)
    with LoopbackServer(dataset([{"q": "a"}])) as server:
        assert hf_rows("acme/x", endpoint=server.url, cache=False, retries=0) == [{"q": "a"}]
    assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize("pasted", [TOKEN + "é", TOKEN[:10] + "\n" + TOKEN[10:]])
def test_a_token_no_header_can_carry_is_a_user_error(pasted, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", pasted)
    with LoopbackServer(dataset([{"q": "a"}])) as server:
        with pytest.raises(UserError, match="HF_TOKEN") as info:
            hf_rows("acme/x", endpoint=server.url, cache=False, retries=0)
    assert server.requests == [] and TOKEN[4:] not in str(info.value)
