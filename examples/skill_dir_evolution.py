"""Evolve a real skill folder: the directory quickstart, end to end.

    python -m examples.skill_dir_evolution                 # offline: a scripted agent and reflector
    python -m examples.skill_dir_evolution --claude        # the `claude` CLI runs each rollout, Claude reflects
    python -m examples.skill_dir_evolution --into my-copy  # evolve a copy kept at my-copy (default: a temporary copy)

The skill (`examples/skills/support-router`) routes customer support requests to a team. Its
SKILL.md says how; each team's file in `routing/` lists the words that send a request there,
and starts with none. `references/teams.md` is read-only context and `hooks/pre.sh` is frozen.
Each rollout copies the candidate skill into a fresh workspace at
`.claude/skills/support-router/`, where Claude Code finds it, and asks the agent to route one
request; the reward is exact match. The reflector reads a misrouted request and rewrites one
team's file: one more word for the right team, or, when a listed word sent the request to the
wrong team, that word removed. Offline, it sometimes picks a word that fixes this request and
breaks others (the acceptance test refuses those). Workers' diffs on different teams' files
land together. The shipped example is never written: the run works on a copy, and
`result.write_to` writes the copy back with a backup.

`--claude` needs the `claude` CLI on PATH and ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a
compatible server); AGENTDESCENT_MODEL picks the reflector's model.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from agentdescent import FileTree, evolve, load_tree, scorer, tree_reflector, tree_runner
from agentdescent.agents import claude, claude_code, scripted
from agentdescent.cli.views import ProgressView
from agentdescent.events import Event
from agentdescent.governance import SKILL_BLAST_RADIUS
from agentdescent.result import EvolveResult
from agentdescent.testing import FILLERS, SIGNALS, router_tasks

SKILL = Path(__file__).resolve().parent / "skills" / "support-router"
NAME = "support-router"
TEAMS = tuple(SIGNALS)  # the order the skill checks them in


def listed_words(text: str) -> list[str]:
    """The words a routing file lists. listed_words("# billing\n\n- invoice\n") == ["invoice"]"""
    return [line[2:].strip().lower() for line in text.splitlines() if line.startswith("- ")]


def route_by_skill(prompt: str, cwd: str, latency: float = 0.0) -> str:
    """The offline agent: it reads the skill's routing files where Claude Code would, and routes as they say."""
    time.sleep(latency)
    routing = Path(cwd, ".claude", "skills", NAME, "routing")
    said = set(re.findall(r"\w+", prompt.lower()))
    for team in TEAMS:
        if said & set(listed_words((routing / f"{team}.md").read_text(encoding="utf-8"))):
            return team
    return "general"


def agent_prompt(task) -> str:
    return f"Use the {NAME} skill. Which team handles this request? Answer with the team's name only.\n\n{task.prompt}"


class SkillReflector:
    """The offline reflector: reads a misrouted request in the tree reflector's prompt and adds one
    word under the expected team's heading. It picks the word that signals the team most of the
    time, a filler word that fixes this request and breaks others some of the time (`noise`), and
    nothing now and then (`silence`). Deterministic for a seed; asked again, it may answer otherwise."""

    def __init__(self, seed: int = 0, *, noise: float = 0.1, silence: float = 0.1, latency: float = 0.0) -> None:
        self.seed, self.noise, self.silence, self.latency = seed, noise, silence, latency
        self._asked: dict[str, int] = {}

    def __call__(self, prompt: str) -> str:
        time.sleep(self.latency)
        case = re.search(r"<task>\n(.*?)\n</task>\n<answer>\n(.*?)\n</answer>\n<expected>\n(\w+)\n</expected>", prompt, re.DOTALL)
        if case is None:
            return "NONE"
        request, answered, team = case.group(1).lower(), case.group(2).strip().lower(), case.group(3)
        words = re.findall(r"\w+", request)
        if answered in TEAMS:  # a listed word sent it to the wrong team: take that word out
            text = _routing_file(prompt, answered)
            misfire = next((w for w in words if w in listed_words(text)), None) if text else None
            if misfire is None:
                return "NONE"
            return _file_block(answered, text.replace(f"- {misfire}\n", "", 1))
        text = _routing_file(prompt, team)
        if text is None:  # a general request: nothing to add
            return "NONE"
        roll = self._rng(prompt).random()
        if roll < self.silence:
            return "NONE"
        pool = FILLERS if roll < self.silence + self.noise else SIGNALS[team]
        word = next((w for w in words if w in pool and w not in listed_words(text)), None)
        return "NONE" if word is None else _file_block(team, text + f"- {word}\n")

    def _rng(self, prompt: str) -> random.Random:
        key = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        attempt = self._asked[key] = self._asked.get(key, -1) + 1
        return random.Random(f"{self.seed}|{key}|{attempt}")


def _routing_file(prompt: str, team: str) -> str | None:
    found = re.search(rf'<file path="routing/{team}.md">\n(.*?)</file>', prompt, re.DOTALL)
    return found.group(1) if found else None


def _file_block(team: str, text: str) -> str:
    return f'<file path="routing/{team}.md">\n{text}</file>'


def evolve_skill(folder: str | os.PathLike[str], *, use_claude: bool = False, workers: int = 4, rounds: int = 12,
                 seed: int = 0, latency: float = 0.0, store: str | os.PathLike[str] | None = None,
                 max_concurrency: int | None = None, workdir: str | os.PathLike[str] | None = None,
                 on_event: Callable[[Event], None] | None = None) -> EvolveResult:
    """The directory quickstart on `folder`: load it, evolve it, return the result (nothing written)."""
    tree = load_tree(folder)
    strategy = FileTree(tree, max_files_per_diff=2, editable=("SKILL.md", "routing/*"), frozen=["hooks/*"])
    if use_claude:
        agent = claude_code()
        reflect_with = claude(os.environ.get("AGENTDESCENT_MODEL", "claude-sonnet-4-5"))
    else:
        agent = scripted(lambda prompt, cwd: route_by_skill(prompt, cwd, latency))
        reflect_with = scripted(SkillReflector(seed, latency=latency))
    run = tree_runner(agent, layout="claude_skill", name=NAME, overlay=strategy.frozen_files(tree), prompt=agent_prompt,
                      workdir=workdir, max_workspaces=max_concurrency or 32)  # as many as calls in flight
    tasks = router_tasks(seed, signals=4, per_signal=3)
    return evolve(
        tasks, scorer("exact"), run=run, propose=tree_reflector(reflect_with, strategy=strategy), strategy=strategy,
        blast_radius=SKILL_BLAST_RADIUS, self_verify=False, cheap_eval_tasks=4, rounds=rounds, n_workers=workers,
        target_reward=1.0, seed=seed, store=store, max_concurrency=max_concurrency, on_event=on_event,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claude", action="store_true", help="run rollouts with the claude CLI, reflect with Claude")
    parser.add_argument("--into", help="the copy of the example skill to evolve and write back (default: a temporary one)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    target = Path(args.into) if args.into else Path(tempfile.mkdtemp(prefix="support-router-")) / NAME
    if not target.exists():
        shutil.copytree(SKILL, target)
    print(f"evolving {target} ({'claude' if args.claude else 'offline, scripted'}, {args.workers} workers)")
    view = ProgressView(Console())  # with --claude each rollout is an agent run: minutes in all
    with view:
        result = evolve_skill(target, use_claude=args.claude, workers=args.workers, rounds=args.rounds,
                              seed=args.seed, on_event=view.on_event)
    print(f"stopped: {result.stop_reason}")
    for warning in result.warnings:
        print(f"warning: {warning}")
    print(f"held-out reward: {result.initial_reward:.3f} -> {result.final_reward:.3f} in {len(result.history)} rounds, "
          f"{result.usage.calls} calls; outcomes {result.outcomes()}")
    plan = result.write_to(target)
    print(f"written back: {plan}")
    for team in TEAMS:
        print(f"routing/{team}.md lists: {', '.join(listed_words((target / 'routing' / f'{team}.md').read_text(encoding='utf-8')))}")
    print(f"ledger: {result.ledger_path}")


if __name__ == "__main__":
    main()
