"""The documentation site: every code block on every page runs, and the pages that mirror the code agree with it.

Each python and bash block of docs/ is one test (its id: page, line, and how it ran), run as
tests/docs_blocks.py describes: offline, in a throwaway folder, against the stand-ins its marker
names. A skipped block is a pytest skip with the marker's reason (`pytest -rs` lists them); a
block that ran against stand-ins says so in its id (`pytest -v`). The other tests check the
pages that are written from the code: the evolve table against `evolve`'s signature, the API
page against `agentdescent.__all__`, the Architecture figures against the modules, and the nav
against the pages.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys

import pytest
import yaml

import agentdescent
from tests.docs_blocks import DOCS, ROOT, STAND_INS, PageRuns, blocks, pages

BLOCKS = [block for page in pages() for block in blocks(page)]
PACKAGE = ROOT / "agentdescent"
MOST_SKIPS = 2  # skipping is for what cannot run here at all; each skip says why


@pytest.fixture(scope="module")
def page_runs(request):
    """The pages of the blocks selected (all of them, or those `-k` picks), started at once, run side by side."""
    chosen = {item.callspec.params["block"].page for item in request.session.items
              if "block" in getattr(getattr(item, "callspec", None), "params", {})}
    runs = PageRuns(sorted(chosen))
    yield runs
    runs.close()


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_the_block_runs(block, page_runs):
    ran = page_runs.of(block)
    if ran.status == "skipped":
        pytest.skip(f"{block.name}: {ran.reason}")
    assert ran.status == "passed", f"{block.name} failed after {ran.seconds:.1f} s:\n{ran.output[-4000:]}"


def test_every_skip_and_parse_only_says_why_and_skips_stay_rare():
    for block in BLOCKS:
        assert block.mode == "run" or len(block.reason) > 10, f"{block.name}: say why it does not run"
    skipped = [block.name for block in BLOCKS if block.mode == "skip"]
    assert len(skipped) <= MOST_SKIPS, f"{len(skipped)} blocks are skipped: {skipped}; make them run, with stand-ins"
    assert {name for block in BLOCKS for name in block.stand_ins} <= set(STAND_INS)


def test_every_page_has_a_block_that_runs_or_none_at_all():
    """A page whose every block is skipped would show code that nothing checks."""
    for page in {block.page for block in BLOCKS}:
        modes = {block.mode for block in BLOCKS if block.page == page}
        assert modes != {"skip"}, f"{page.name}: every block is skipped"


# The evolve method page: one row per parameter, each with its modules and an example.

def evolve_table() -> dict[str, list[str]]:
    """{parameter: [module, ...]} from the table under "## Every parameter" in docs/evolve.md."""
    text = (DOCS / "evolve.md").read_text(encoding="utf-8")
    section = text.split("## Every parameter", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`", cells[0]) if len(cells) == 5 else None
        if name:
            rows[name.group(1)] = re.findall(r"`([\w/]+\.py)`", cells[3])
    return rows


def test_the_evolve_table_lists_exactly_the_parameters_of_evolve():
    table = evolve_table()
    assert list(table) == list(inspect.signature(agentdescent.evolve).parameters), \
        "docs/evolve.md's table must list every parameter of evolve(), in its order, and nothing else"


def test_every_module_the_evolve_table_names_exists_and_every_parameter_has_an_example():
    text = (DOCS / "evolve.md").read_text(encoding="utf-8")
    for name, modules in evolve_table().items():
        assert modules, f"{name}: name the module that implements it"
        assert all((PACKAGE / m).is_file() for m in modules), f"{name}: {modules} are not all modules of agentdescent/"
        example = text.split(f"\n#### {name}\n", 1)
        assert len(example) == 2, f"docs/evolve.md has no example heading '#### {name}'"
        body = example[1].split("\n#### ", 1)[0].split("\n### ", 1)[0]
        assert "```python" in body and f"{name}=" in body or name in ("tasks", "reward"), \
            f"the example of {name} must be a python block that passes {name}="


# The API page: one mkdocstrings entry per public name.

def api_entries() -> list[str]:
    return re.findall(r"^::: ([\w.]+)$", (DOCS / "api.md").read_text(encoding="utf-8"), re.MULTILINE)


def resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_api_page_has_an_entry_for_exactly_the_public_names():
    entries = api_entries()
    named = [entry.rpartition(".")[2] for entry in entries]
    assert sorted(named) == sorted(agentdescent.__all__), "docs/api.md and agentdescent.__all__ disagree"
    assert len(set(named)) == len(named), "a public name has two entries on docs/api.md"
    for entry, name in zip(entries, named):
        assert resolve(entry) is getattr(agentdescent, name), f"{entry} is not the object agentdescent exports as {name}"


def test_every_public_name_has_a_docstring_for_the_api_page():
    missing = [name for name in agentdescent.__all__ if not inspect.getdoc(getattr(agentdescent, name))]
    assert missing == [], f"the API page would show these without a word: {missing}"


# The Architecture page's figures, drawn from the code by the MkDocs hook.

@pytest.fixture(scope="module")
def diagrams():
    spec = importlib.util.spec_from_file_location("docs_diagrams", DOCS / "hooks" / "diagrams.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_diff_path_figure_names_the_current_stages_and_modules(diagrams):
    path = diagrams.diff_path()
    assert [stage.name for stage in path.step] == ["admit", "rebase", "resolve", "accept", "commit"]
    assert [stage.module for stage in path.step] == [f"step/{name}.py" for name in ("admit", "rebase", "resolve", "accept", "commit")]
    assert [stage.name for stage in path.worker] == ["Worker.roll", "Worker.reflect", "Worker.verify"]
    assert path.hand_over.name == "Loop._judge" and path.ledger.name == "Ledger.commit"
    assert all((PACKAGE / module).is_file() for module in path.modules())
    figure = diagrams.figure("diff-path")
    named = set(re.findall(r"\b([a-z_]+(?:/[a-z_]+)+\.py)\b", figure))
    assert path.modules() <= named and all((PACKAGE / m).is_file() for m in named), named
    assert {"invalid", "refused_by_governance", "rejected_by_test", "committed"} <= set(re.findall(r"\b[a-z_]+\b", figure))


def test_the_import_figure_names_every_folder_of_the_package(diagrams):
    figure = diagrams.figure("imports")
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {f"{folder}/" for folder in folders} <= set(re.findall(r"\[\"(\w+/)\"\]", figure))


def test_the_architecture_page_asks_for_both_figures(diagrams):
    text = (DOCS / "how-a-diff-travels.md").read_text(encoding="utf-8")
    assert set(re.findall(r"<!-- figure: ([\w-]+) -->", text)) == diagrams.FIGURES
    drawn = diagrams.on_page_markdown(text, page=None, config=None, files=None)
    assert "<!-- figure:" not in drawn and drawn.count("```mermaid") == 2


# The site: every page is in the nav (mkdocs build --strict says so too, in CI).

class _AnyTags(yaml.SafeLoader):
    """mkdocs.yml names Python objects (`!!python/name:...`); here they only need to load."""


_AnyTags.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def nav_pages(nav) -> list[str]:
    found = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_page_is_in_the_nav_once_and_every_nav_entry_is_a_page():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_AnyTags)
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed))
    assert set(listed) == {page.relative_to(DOCS).as_posix() for page in pages()}
