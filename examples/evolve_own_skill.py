"""AgentDescent evolving its own skill (`skills/agentdescent/SKILL.md`), the one the host plugins ship.

    python -m examples.evolve_own_skill                      # check and evolve a copy, offline
    python -m examples.evolve_own_skill --write-back         # then write the result over skills/agentdescent (backup first)
    python -m examples.evolve_own_skill --claude             # the claude CLI answers, Claude reflects (needs a key)

The tasks are questions a host agent meets while driving a run, each scored by whether the answer
holds the word that settles it. Some are about the procedure the skill teaches ("May you write the
evolved skill back right away?": "ask"), which the shipped skill answers. The others are what users
ask about the tool itself ("How do I get an HTML report of a run?": "agentdescent report"), whose answers
the documentation gives and the shipped skill does not. Offline, the agent answers with the lines
of the skill that share a word with the question, read from `.claude/skills/agentdescent/SKILL.md`
in its workspace, and the reflector puts back a procedure step the question shows missing, or adds
the sentence of the documentation that answers it (read from `docs/` as it is) under "Good to
know". The run works on a copy; `--write-back` writes the evolved skill over the shipped one with a
backup next to it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from agentdescent import FileTree, Task, evolve, load_tree, scorer, tree_reflector, tree_runner
from agentdescent.agents import claude, claude_code, scripted
from agentdescent.cli.guard import script
from agentdescent.cli.views import ProgressView
from agentdescent.events import Event
from agentdescent.result import EvolveResult

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "skills" / "agentdescent"
DOCS = ROOT / "docs"
NAME = "agentdescent"
FACTS_HEADING = "## Good to know"

# The shipped skill's own procedure, a step a line, and its first safety rule: what the offline
# reflector puts back when a question shows one missing
_SHIPPED = (SKILL / "SKILL.md").read_text(encoding="utf-8")
STEPS = re.findall(r"^\d+\. (.*)$", _SHIPPED, re.MULTILINE)
SAFETY = next(line[2:] for line in _SHIPPED.splitlines() if line.startswith("- The evolved text"))


def doc_fact(doc: str, anchor: str) -> str:
    """The sentence of `docs/<doc>` that holds `anchor`, as a line of the skill: the section it is
    in, then the sentence, on one line. doc_fact("runs.md", "`agentdescent report RUN` writes") starts
    "- Reviewing and writing back: It ends with where the run report goes" """
    heading, found = "", None
    for block in re.split(r"\n\s*\n|\n(?=- )", (DOCS / doc).read_text(encoding="utf-8")):
        if block.startswith("#"):
            heading = block.lstrip("#").strip().split("\n")[0]
        flat = " ".join(block.split()).removeprefix("- ")
        if anchor in flat:
            found = next(s for s in re.split(r"(?<=\.)\s+(?=[A-Z`])", flat) if anchor in s)
            break
    if found is None:
        raise LookupError(f"docs/{doc} no longer says {anchor!r}: the question built on it needs a new source")
    return f"- {heading}: {found}"


# (question, the word the answer must hold, the step that teaches it)
QUESTIONS = [
    ('What do you check first, before anything else?', 'doctor', STEPS[0]),
    ('The user has no tasks to score against. What do you do?', 'draft', STEPS[1]),
    ('How many tasks should you draft?', '20', STEPS[1]),
    ('What do you quote to the user before anything runs?', 'cost', STEPS[2]),
    ('Can you start the run as soon as the plan is ready?', 'yes', STEPS[3]),
    ('Which files does a run never change?', 'frozen', STEPS[2]),
    ('How often should you check on a running evolution?', 'sparingly', STEPS[5]),
    ('What do you show the user when the run is done?', 'evidence', STEPS[6]),
    ('May you write the evolved skill back to the folder right away?', 'ask', STEPS[7]),
    ('After writing back, what do you tell the user?', 'backup', STEPS[8]),
    ('How does the user undo a write-back?', 'restore', STEPS[8]),
    ("The evolved skill tells you to run a command. Do you run it?", "never", SAFETY),
]
# (question, the word the answer must hold, the document and the words of the sentence that answers it)
ASKED_OF_THE_DOCS = [
    ("Where are the runs kept on disk?", "~/.agentdescent/runs", "runs.md", "default `~/.agentdescent/runs`"),
    ("How do I get an HTML report of a run?", "agentdescent report", "runs.md", "`agentdescent report RUN` writes"),
    ("Do the run's files ever hold my keys?", "redacted", "runs.md", "keys are refused in specs and redacted"),
    ("How does the user undo a restore?", "second restore", "runs.md", "a second restore undoes"),
    ("How do I add AgentDescent to Codex?", "agentdescent install codex", "hosts.md", "`agentdescent install codex` appends"),
]
_STOP = {"a", "an", "the", "to", "you", "do", "what", "is", "it", "of", "and", "or", "as", "be", "before", "after",
         "can", "may", "how", "which", "does", "should", "must", "when", "your", "its", "in", "on", "for", "with"}


def teachings() -> dict[str, tuple[str, bool]]:
    """{question: (the line that answers it, whether that line is a procedure step)}."""
    steps = {q: (step, True) for q, _, step in QUESTIONS}
    return {**steps, **{q: (doc_fact(doc, anchor), False) for q, _, doc, anchor in ASKED_OF_THE_DOCS}}


def question_tasks() -> list[Task]:
    asked = [(q, word) for q, word, _ in QUESTIONS] + [(q, word) for q, word, _, _ in ASKED_OF_THE_DOCS]
    return [Task(id=f"q{i:02d}", prompt=question, gold=word) for i, (question, word) in enumerate(asked)]


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def answer_from_skill(prompt: str, cwd: str) -> str:
    """The offline agent: the lines of the skill that share a content word with the question."""
    skill = Path(cwd, ".claude", "skills", NAME, "SKILL.md").read_text(encoding="utf-8")
    body = skill.split("---", 2)[-1]  # past the frontmatter
    asked = content_words(prompt)
    lines = [line for line in body.splitlines() if line.strip() and asked & content_words(line)]
    return "\n".join(lines) or "I don't know."


def add_missing_step(prompt: str) -> str:
    """The offline reflector: what the question that failed needed, added to the skill: its step
    back in the procedure, or the documentation's sentence under "Good to know"."""
    skill = re.search(r'<file path="SKILL.md">\n(.*?)</file>', prompt, re.DOTALL)
    asked = re.search(r"<task>\n(.*?)\n</task>", prompt, re.DOTALL)
    line, is_step = teachings().get(asked.group(1) if asked else "", ("", False))
    if skill is None or not line or line in skill.group(1):
        return "NONE"
    text = skill.group(1)
    if is_step:
        numbered = [int(n) for n in re.findall(r"^(\d+)\. ", text, re.MULTILINE)]
        step = f"{max(numbered, default=0) + 1}. {line}\n"
        text = re.sub(r"(## Procedure\n\n(?:\d+\. .*\n)*)", lambda m: m.group(1) + step, text)
    elif FACTS_HEADING in text:
        text = re.sub(rf"({FACTS_HEADING}\n\n(?:- .*\n)*)", lambda m: m.group(1) + line + "\n", text)
    else:
        section = f"{FACTS_HEADING}\n\n{line}\n\n"
        text = text.replace("## Safety", section + "## Safety", 1) if "## Safety" in text else (
            text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n")
    return f'<file path="SKILL.md">\n{text}</file>'


def evolve_own_skill(folder: str | os.PathLike[str], *, use_claude: bool = False, rounds: int = 6, workers: int = 3,
                     store: str | os.PathLike[str] | None = None,
                     on_event: Callable[[Event], None] | None = None) -> EvolveResult:
    tree = load_tree(folder)
    strategy = FileTree(tree, max_files_per_diff=1, editable=("SKILL.md",))
    agent = claude_code() if use_claude else scripted(answer_from_skill)
    model = claude(os.environ.get("AGENTDESCENT_MODEL", "claude-sonnet-4-5")) if use_claude else scripted(add_missing_step)
    return evolve(
        question_tasks(), scorer("contains"), run=tree_runner(agent, layout="claude_skill", name=NAME),
        propose=tree_reflector(model, strategy=strategy), strategy=strategy, rounds=rounds, n_workers=workers,
        held_out_frac=0.0, target_reward=1.0, store=store, on_event=on_event,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claude", action="store_true")
    parser.add_argument("--write-back", action="store_true", help="write the evolved skill over skills/agentdescent")
    args = parser.parse_args()
    copy = Path(tempfile.mkdtemp(prefix="agentdescent-skill-")) / NAME
    shutil.copytree(SKILL, copy)
    view = ProgressView(Console())  # with --claude each answer is an agent run: minutes in all
    with view:
        result = evolve_own_skill(copy, use_claude=args.claude, on_event=view.on_event)
    print(f"stopped: {result.stop_reason}")
    for warning in result.warnings:
        print(f"warning: {warning}")
    landed = result.outcomes().get("committed", 0) + result.outcomes().get("fused", 0)
    print(f"reward on the skill's own questions: {result.initial_reward:.3f} -> {result.final_reward:.3f}; "
          f"{landed} of {len(result.outcome_list)} proposed changes landed")
    target = SKILL if args.write_back else copy
    plan = result.write_to(target)
    if plan.written or plan.deleted:
        print(f"wrote {', '.join(plan.written + plan.deleted)} in {target}; the previous version is in {plan.backup}")
    else:
        print(f"{target} already holds the evolved skill; nothing was written")


if __name__ == "__main__":
    script(main)  # an error is one line with its fix (--debug: the traceback)
