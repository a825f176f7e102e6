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
`result.write_to` writes the copy back with a backup. The offline agent and reflector are
`agentdescent.testing`'s (`route_by_skill`, `SkillReflector`), which the run spec
`examples/specs/support-router.yaml` names too.

`--claude` needs the `claude` CLI on PATH and ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a
compatible server); AGENTDESCENT_MODEL picks the reflector's model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from agentdescent import FileTree, Task, evolve, load_tree, scorer, tree_reflector, tree_runner
from agentdescent.agents import Model, claude, claude_code, scripted
from agentdescent.cli.guard import script
from agentdescent.cli.views import ProgressView
from agentdescent.events import Event
from agentdescent.governance import SKILL_BLAST_RADIUS
from agentdescent.result import EvolveResult
from agentdescent.testing import SKILL_NAME, TEAMS, SkillReflector, listed_words, route_by_skill, router_tasks

# The offline agent and reflector (route_by_skill, SkillReflector) are the package's, so that a run spec
# names them from any folder.
SKILL = Path(__file__).resolve().parent / "skills" / "support-router"
NAME = SKILL_NAME  # where Claude Code reads the skill in each workspace: .claude/skills/support-router/


def agent_prompt(task) -> str:
    return f"Use the {NAME} skill. Which team handles this request? Answer with the team's name only.\n\n{task.prompt}"


def skill_tasks(seed: int = 0) -> list[Task]:
    """The requests the quickstart routes: 3 for each of 4 words a team, and some for no team."""
    return router_tasks(seed, signals=4, per_signal=3)


def evolve_skill(folder: str | os.PathLike[str], *, use_claude: bool = False, workers: int = 4, rounds: int = 12,
                 seed: int = 0, latency: float = 0.0, store: str | os.PathLike[str] | None = None,
                 max_concurrency: int | None = None, workdir: str | os.PathLike[str] | None = None,
                 on_event: Callable[[Event], None] | None = None, agent: Callable[..., str] | None = None,
                 reflect_with: Callable[[str], str] | None = None, reward: Callable | None = None,
                 target_reward: float | None = 1.0) -> EvolveResult:
    """The directory quickstart on `folder`: load it, evolve it, return the result (nothing written).
    Offline, `agent` (prompt, cwd -> answer), `reflect_with` (prompt -> reply) and `reward` stand in
    for the scripted agent, the scripted reflector and exact match (a benchmark's noisy ones, say)."""
    tree = load_tree(folder)
    strategy = FileTree(tree, max_files_per_diff=2, editable=("SKILL.md", "routing/*"), frozen=["hooks/*"])
    model: Callable[..., str]  # an agent, called (prompt, cwd=folder): the claude CLI or a scripted stand-in
    reflect_model: Model
    if use_claude:
        model, reflect_model = claude_code(), claude(os.environ.get("AGENTDESCENT_MODEL", "claude-sonnet-4-5"))
    else:
        model = scripted(agent or (lambda prompt, cwd: route_by_skill(prompt, cwd, latency)))
        reflect_model = scripted(reflect_with or SkillReflector(seed, latency=latency))
    run = tree_runner(model, layout="claude_skill", name=NAME, overlay=strategy.frozen_files(tree), prompt=agent_prompt,
                      workdir=workdir, max_workspaces=max_concurrency or 32)  # as many as calls in flight
    propose = tree_reflector(reflect_model, strategy=strategy)
    return evolve(
        skill_tasks(seed), reward or scorer("exact"), run=run, propose=propose, strategy=strategy,
        blast_radius=SKILL_BLAST_RADIUS, self_verify=False, cheap_eval_tasks=4, rounds=rounds, n_workers=workers,
        target_reward=target_reward, seed=seed, store=store, max_concurrency=max_concurrency, on_event=on_event,
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
    script(main)
