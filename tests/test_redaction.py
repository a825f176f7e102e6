"""Keys never leave a client: `redact` on every form of a key, the log filter and guard, and a
whole `evolve` run against hostile servers on 127.0.0.1 that echo a canary key in every form,
searched for afterwards in the ledger, the result, the logs, the events and the exceptions."""

from __future__ import annotations

import html
import json
import logging
import pickle
import random
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote_plus

import pytest

from agentdescent import Task, evolve, reflector
from agentdescent.agents import claude, claude_code, openai_compatible, redact
from agentdescent.agents.redact import DEBUG_HTTP_ENV, guard_logging, secrets
from agentdescent.dataloader import hf_rows
from agentdescent.errors import AgentDescentError, AgentError
from tests.loopback import LoopbackServer, Response, anthropic_messages, openai_chat

CANARY = "sk-canary-7f3a9c2e1b5d"
CORE = "7f3a9c2e1b5d"  # the canary's random part: found alone, it is a leak too
ODD = 'hf_a"b\\c/d é€😀+&x'  # every character class an encoder treats differently
FAST = {"backoff": (0.001, 0.005), "max_retries": 2}


pytestmark = pytest.mark.usefixtures("no_provider_env")


@pytest.fixture
def canary(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    return CANARY


@pytest.fixture
def http_logger_levels():
    """Put httpx's and httpcore's logger levels back as they were after the test."""
    loggers = [logging.getLogger(name) for name in ("httpx", "httpcore", "httpcore.http11", "httpcore.connection")]
    levels = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


# --- the forms a key may take -------------------------------------------------------------------


def split(parts: list[str], sep: str, rng: random.Random, count: int = 2) -> str:
    """The parts joined, with `sep` between `count` random neighbours."""
    cuts = set(rng.sample(range(1, len(parts)), count))
    return "".join((sep if i in cuts else "") + part for i, part in enumerate(parts))


def forms(key: str, seed: int = 0) -> dict[str, str]:
    """Every form a server may echo `key` in."""
    rng, chars = random.Random(seed), list(key)
    u = [f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in key]
    pct = [quote(c, safe="").lower() if quote(c, safe="") != c else f"%{ord(c):02x}" for c in key]
    one = rng.randrange(len(key))
    return {
        "raw": key,
        "json escape of one char": key[:one] + u[one] + key[one + 1:],
        "json escape of all chars": "".join(u),
        "json escape, upper-case hex": "".join(u).upper().replace("\\U", "\\u"),
        "json.dumps": json.dumps(key)[1:-1],
        "json.dumps twice": json.dumps(json.dumps(key))[3:-3],
        "quote": quote(key, safe=""),
        "quote_plus": quote_plus(key),
        "lower-case percent of all chars": "".join(pct),
        "percent of one char": key[:one] + pct[one] + key[one + 1:],
        "split by a newline": split(chars, "\n", rng),
        "split by CRLF": split(chars, "\r\n", rng),
        "split by spaces": split(chars, " ", rng, count=4),
        "split by an escaped newline": split(chars, "\\n", rng),
        "json escape and split": split(u, "\n", rng, count=3),
        "html references": "".join(f"&#{ord(c)};" for c in key),
    }


ALL = " | ".join(forms(CANARY).values())


def decodings(text: str) -> list[str]:
    """`text` decoded every way a reader might (written apart from `redact`, to check it)."""
    found, current = [text], text
    for _ in range(3):
        current = html.unescape(unquote_plus(current))
        current = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), current)
        current = re.sub(r"\\+x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), current)
        found.append(re.sub(r"\\+[nrt]", "", current))
    found.append(re.sub(r"[\s\\]", "", found[-1]))
    return found


def leaks(text: str) -> bool:
    return any(CANARY in text or CORE in text for text in decodings(text))


# --- redact -------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", list(forms(CANARY)))
def test_every_form_of_the_canary_is_redacted(canary, form):
    text = forms(CANARY)[form]
    assert leaks(text)
    assert redact(f"<{text}>") == "<[redacted ANTHROPIC_API_KEY]>"


@pytest.mark.parametrize("form", list(forms(ODD)))
def test_every_form_of_a_key_with_quotes_slashes_and_non_ascii_is_redacted(monkeypatch, form):
    monkeypatch.setenv("HF_TOKEN", ODD)
    assert redact(f"error: {forms(ODD, seed=3)[form]}.") == "error: [redacted HF_TOKEN]."


@pytest.mark.parametrize("seed", range(20))
def test_splits_at_random_points(canary, seed):
    rng = random.Random(seed)
    text = split(list(CANARY), rng.choice(["\n", " ", "  ", "\r\n", "\t", "\\n"]), rng, count=rng.randint(1, 6))
    assert redact(f"key={text};") == "key=[redacted ANTHROPIC_API_KEY];"


# What a terminal or a page draws as nothing: format characters (Cf) and the default-ignorable ones
# of other categories (a combining joiner, variation selectors, Hangul fillers).
INVISIBLES = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u200e", "\u200f", "\u00ad", "\u034f", "\u061c",
              "\u180e", "\u2061", "\u2064", "\u202a", "\u202e", "\u2066", "\u2069", "\ufe00", "\ufe0f", "\U000e0001",
              "\U000e0041", "\U000e007f", "\U000e0100", "\U000e01ef", "\u115f", "\u1160", "\u3164", "\uffa0", "\x1b"]


@pytest.mark.parametrize("invisible", INVISIBLES, ids=lambda c: f"U+{ord(c):04X}")
def test_a_key_split_by_an_invisible_character_is_redacted(canary, invisible):
    """A key looks whole with any of these inside it, in a terminal, a page or a diff: a reader
    (or a model) copies the key, so it is the key."""
    rng = random.Random(ord(invisible))
    assert redact(f"key={CANARY[:6]}{invisible}{CANARY[6:]};") == "key=[redacted ANTHROPIC_API_KEY];"
    text = split(list(CANARY), invisible * rng.randint(1, 3), rng, count=rng.randint(1, 5))
    assert redact(f"key={text};") == "key=[redacted ANTHROPIC_API_KEY];"


def test_unrelated_text_and_near_misses_are_left_alone(canary):
    for text in ["", "Incorrect API key provided.", "sk-canary-7f3a9c2e1b5", "sk-canary-7f3a9c2e1b5e",
                 CORE, (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")]:
        assert redact(text) == text
    assert redact(None) is None


def test_short_values_are_not_secrets_and_a_childs_variables_are(canary, monkeypatch):
    monkeypatch.setenv("DEBUG_TOKEN", "1")
    monkeypatch.setenv("SHORT_SECRET", "abc1234")
    monkeypatch.setenv("LONG_SECRET", "abcd1234")
    assert "DEBUG_TOKEN" not in secrets() and "SHORT_SECRET" not in secrets()
    assert redact("1 abc1234 abcd1234") == "1 abc1234 [redacted LONG_SECRET]"
    assert redact("x lives-only-in-the-child", env={"CHILD_AUTH": "lives-only-in-the-child"}) == \
        "x [redacted CHILD_AUTH]"


def test_a_clients_key_variable_counts_whatever_its_name(monkeypatch):
    monkeypatch.setenv("ZZ_MODEL_PASS", "plain-looking-value")
    assert "ZZ_MODEL_PASS" not in secrets()
    openai_compatible("m", api_key_env="ZZ_MODEL_PASS")
    assert redact("got plain-looking-value") == "got [redacted ZZ_MODEL_PASS]"


def test_a_megabyte_of_hostile_text_is_linear(canary, capsys):
    hostile = {
        "near misses split by spaces": " ".join(CANARY[:-1]) * 24_000,
        "near misses escaped": ("\\u0073\\u006b\\u002d" + CANARY[3:-1] + " ") * 30_000,
        "a run of backslashes": "\\" * 1_000_000,
        "a run of escaped newlines": "s" + "\\n" * 500_000,
        "percent runs": "%25" * 333_333,
        "a start followed by spaces": ("s" + " " * 999) * 1000,
        "a start followed by invisible characters": ("s" + "\u200b\U000e0041\ufe0f" * 333) * 1000,
    }
    for name, text in hostile.items():
        start = time.perf_counter()
        out = redact(text + " " + CANARY)
        seconds = time.perf_counter() - start
        assert out.endswith(" [redacted ANTHROPIC_API_KEY]") and CANARY not in out
        with capsys.disabled():
            print(f"\nredact on {len(text) / 1e6:.2f} MB ({name}): {seconds:.3f} s")


# --- logs ---------------------------------------------------------------------------------------


def test_log_records_are_redacted_with_their_arguments_and_tracebacks(canary, caplog):
    guard_logging()
    log = logging.getLogger("agentdescent.agents.http")
    caplog.set_level(logging.DEBUG)
    try:
        raise ValueError(f"server said {forms(CANARY)['json escape of one char']}")
    except ValueError:
        log.exception("call failed with %s and %r", CANARY, {"key": CANARY})
    assert "[redacted ANTHROPIC_API_KEY]" in caplog.text and "ValueError" in caplog.text
    assert not leaks(caplog.text) and not leaks(" ".join(r.getMessage() for r in caplog.records))


def test_httpx_and_httpcore_stay_at_info_unless_asked(monkeypatch, http_logger_levels):
    for name in ("httpx", "httpcore", "httpcore.http11"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    guard_logging()
    assert all(logging.getLogger(n).getEffectiveLevel() == logging.INFO for n in ("httpx", "httpcore.http11"))
    monkeypatch.setenv(DEBUG_HTTP_ENV, "1")
    logging.getLogger("httpcore").setLevel(logging.DEBUG)
    logging.getLogger("httpcore.http11").setLevel(logging.NOTSET)
    guard_logging()
    assert logging.getLogger("httpcore.http11").getEffectiveLevel() == logging.DEBUG


# --- a whole run against hostile servers --------------------------------------------------------

ECHO_HEADERS = {"x-echo-key": CANARY, "x-echo-json": forms(CANARY)["json escape of one char"],
                "x-echo-url": forms(CANARY)["lower-case percent of all chars"],
                "www-authenticate": f'Bearer realm="{CANARY}"'}


def echoing(handler):
    """The handler, with every answer's headers echoing the key."""

    def handle(request):
        response = handler(request)
        response.headers.update(ECHO_HEADERS)
        return response

    return handle


def rollout_reply(prompt: str) -> str | Response:
    """Answers with the key in every form; some tasks fail in every way a server can echo it."""
    task = int(re.search(r"TASK item (\d+)", prompt).group(1))
    if task == 4:
        return Response(body={"echo": list(forms(CANARY).values())})  # 2xx without the answer
    if task == 5:
        return Response(status=500, body={"error": {"message": f"upstream rejected {ALL}"}})
    if task == 6:
        return Response(status=401, body=f"Incorrect API key provided:\n{ALL}")
    if task == 7:
        return Response(body=f"<html>{ALL}</html>")  # 2xx, not JSON
    return f"answer{' 2026' if 'year' in prompt else ''} (my key is {ALL})"


def reflect_reply(prompt: str) -> str | Response:
    if re.search(r"\bitem 3\b", prompt):
        return Response(status=401, body={"type": "error", "error": {"type": "authentication_error",
                                                                     "message": f"invalid x-api-key {ALL}"}})
    return f"<rule>Always state the year 2026, and the key {ALL}</rule>"


def ledger_texts(ledger: Path) -> dict[str, str]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ledger), *args], capture_output=True, check=True).stdout.decode(
            "utf-8", "replace")

    files = "\n".join(p.read_bytes().decode("latin-1") for p in ledger.rglob("*") if p.is_file())
    return {"ledger log": git("log", "-p", "--all"), "ledger objects": git("cat-file", "--batch-all-objects",
                                                                           "--batch"), "ledger files": files}


def exception_text(call) -> str:
    with pytest.raises(AgentError) as caught:
        call()
    exc = caught.value
    return "".join(traceback.format_exception(exc)) + repr(exc) + pickle.dumps(exc).decode("latin-1")


@pytest.mark.parametrize("debug_http", [False, True], ids=["default", "AGENTDESCENT_DEBUG_HTTP=1"])
def test_a_run_against_servers_echoing_the_key_leaks_it_nowhere(canary, monkeypatch, tmp_path, caplog,
                                                                http_logger_levels, debug_http):
    if debug_http:
        monkeypatch.setenv(DEBUG_HTTP_ENV, "1")
    for name in (None, "httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    events = []
    with LoopbackServer(echoing(openai_chat(rollout_reply))) as chat, \
            LoopbackServer(echoing(anthropic_messages(reflect_reply))) as messages:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", messages.url)
        gpt = openai_compatible("gpt-canary", base_url=chat.url + "/v1", **FAST)
        judge = claude("claude-canary", **FAST)
        tasks = [Task(id=f"t{i}", prompt=f"item {i}") for i in range(8)]
        result = evolve(tasks, lambda task, output: 1.0 if "2026" in output else 0.0,
                        run=lambda rendered, task: gpt(f"{rendered}\n\nTASK {task.prompt}"), propose=reflector(judge),
                        rounds=2, n_workers=2, max_concurrency=4, store=tmp_path / "ledger", seed=0,
                        on_event=events.append)
        raised = [exception_text(lambda n=n: gpt(f"TASK item {n}")) for n in (4, 5, 6, 7)]
        raised.append(exception_text(lambda: judge("Write ONE general rule about item 3")))

    haystacks = {
        **ledger_texts(tmp_path / "ledger"),
        "result pickle": pickle.dumps(result).decode("latin-1"), "result repr": repr(result),
        "outcome reasons": "\n".join(o.reason for o in result.outcome_list),
        "usage errors": "\n".join(result.usage.errors), "state": repr((result.state, result.rendered)),
        "logs": caplog.text + "\n".join(r.getMessage() for r in caplog.records),
        "events": repr(events), "exceptions": "\n".join(raised),
    }
    assert [name for name, text in haystacks.items() if leaks(text)] == []
    # and the search was not empty: the echoes arrived and their redacted traces are everywhere
    assert leaks(ALL) and not chat.errors and not messages.errors and events
    assert result.outcomes().get("committed") and "[redacted ANTHROPIC_API_KEY]" in haystacks["ledger log"]
    for name in ("outcome reasons", "usage errors", "exceptions", "state"):
        assert "[redacted ANTHROPIC_API_KEY]" in haystacks[name], name
    assert "HTTP Request: POST" in caplog.text
    httpcore_debug = [r for r in caplog.records if r.name.startswith("httpcore") and r.levelno < logging.INFO]
    assert bool(httpcore_debug) is debug_http
    if debug_http:
        assert "receive_response_headers" in caplog.text and "x-echo-key" in caplog.text


# --- the other clients: a CLI agent and hf_rows -------------------------------------------------


def test_a_cli_agent_echoing_a_key_only_its_env_holds(tmp_path):
    script = tmp_path / "fake-claude"
    script.write_text(f"#!{sys.executable}\n"
                      "import json, sys\n"
                      f"ALL = {ALL!r}\n"
                      "if 'fail' in sys.argv[2]:\n"
                      "    print('x' * 5000 + ALL, file=sys.stderr)\n"
                      "    sys.exit(3)\n"
                      "print(json.dumps({'type': 'result', 'subtype': 'success', 'result': 'done ' + ALL}))\n",
                      encoding="utf-8")
    script.chmod(0o755)
    agent = claude_code(executable=str(script), env={"THE_AGENT_TOKEN": CANARY})
    reply = agent("work", cwd=tmp_path)
    assert reply.startswith("done [redacted THE_AGENT_TOKEN]") and not leaks(reply)
    assert not leaks(exception_text(lambda: agent("fail now", cwd=tmp_path)))


def test_hf_rows_errors_do_not_carry_the_token(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    answers = iter([Response(status=404, body={"error": f"no dataset for token {ALL}"}),
                    Response(status=500, body=f"down, token {ALL}")])
    with LoopbackServer(echoing(lambda request: next(answers))) as server:
        for _ in range(2):
            with pytest.raises(AgentDescentError) as caught:
                hf_rows("acme/qa", endpoint=server.url, cache=False, retries=0)
            text = "".join(traceback.format_exception(caught.value))
            assert "[redacted HF_TOKEN]" in text and not leaks(text)


def test_a_name_counts_as_secret_by_its_words_not_by_a_word_holding_auth(monkeypatch):
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Lovelace")
    monkeypatch.setenv("DEPLOY_AUTH", "Ada Lovelace's pass")
    assert set(secrets()) >= {"DEPLOY_AUTH"} and "GIT_AUTHOR_NAME" not in secrets()


def test_a_tool_s_answer_stays_valid_when_a_secret_s_value_is_one_of_its_own_words(monkeypatch):
    """A variable that looks secret and holds "finished" masks free text, not the record's state."""
    from agentdescent_mcp.redacted import _redacted

    from agentdescent.runs.status import RunStatus

    monkeypatch.setenv("RUN_TOKEN", "finished")
    answer = _redacted(RunStatus(id="r", state="finished", message="finished (reached the target)"))
    assert answer.state == "finished" and answer.message == "[redacted RUN_TOKEN] (reached the target)"
