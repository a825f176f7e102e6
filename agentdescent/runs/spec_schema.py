"""A run spec's JSON schema as a tool argument: every field a model needs to write one, and no more.

The MCP tools `plan` and `evolve` take a spec as a path or as an object; a host's model sees the
argument's schema at every turn, so it is made small from `RunSpec`'s own schema: the fields and
their types, enums, bounds and defaults as pydantic states them, the nested parts a spec writes
by hand (tasks and their column mapping, scorer, agent, budget) inlined, the policy and
parallelism settings named only, every field described in a line (`DESCRIPTIONS`), and the
shorthands (`agent: claude_code`, `tasks: file.jsonl`) as the string forms they are.

    spec_schema()["anyOf"][1]["properties"]["tasks"]   # a path, a list of tasks, or {file, prompt, gold, ...}

Left out: checking a spec (`spec.read_spec` does, and names every problem by field); a schema
that validated would only say less.
"""

from __future__ import annotations

from typing import Any

from agentdescent.dataloader.local import TASK_FILE_SUFFIXES
from agentdescent.runs.spec import RunSpec

DESCRIPTIONS: dict[str, str] = {
    "target": "the file (kind text) or folder (a skill, agents, a plugin) to improve; relative to the spec's folder",
    "kind": "text, skill_dir, agent_dir or plugin; default from the target's shape",
    "tasks": "a tasks file path, a list of {id, prompt, gold}, or {file|hf, prompt, gold, id}: the columns that "
             "hold the prompt and the gold answer, e.g. {file: tasks.jsonl, prompt: request, gold: team}",
    "tasks.inline": "the tasks themselves, each {id, prompt, gold, meta}",
    "tasks.file": f"a {TASK_FILE_SUFFIXES} file of rows", "tasks.hf": "a Hugging Face dataset name",
    "tasks.prompt": "the column holding each task's request, or a format string with {column} fields",
    "tasks.gold": "the column holding the expected answer (null: none)",
    "tasks.id": "the column holding a unique id (default: the row's number when there is no id column; null: the row's number)",
    "scorer": "exact, contains, f1, numeric or regex; python:module:fn (called fn(task, output) -> number in "
              "[0, 1]); or {command: [argv]} for a grader program",
    "scorer.command": "a grader program: the task and output as JSON on stdin, a number on stdout",
    "scorer.timeout": "seconds a grader command may run before it is killed (default 30)",
    "agent": "who does each rollout: claude_code, codex, host (you, through the host tools), claude:MODEL, "
             "openai:MODEL, deepseek, python:module:fn; or {kind, model, ref, options}",
    "agent.options": "the client's keyword arguments (timeout, max_reply_chars, ...); never a key",
    "reflector": "who proposes changes from failures, in the agent's forms; default: the agent",
    "prompt": "what the agent is asked per task; {task} is the task's prompt (default {task})",
    "rounds": "most rounds to run", "n_workers": "parallel workers, each proposing changes",
    "budget": "what the run may spend across every resume",
    "budget.max_calls": "the most model calls (each rollout, reflection or agent session)",
    "budget.max_tokens": "the most tokens", "budget.rollout_timeout": "seconds one rollout or reflection may take",
    "frozen": "folder targets: globs of files no change may touch (hooks, settings)",
    "editable": "folder targets: globs of files a change may touch (default all)",
    "exclude": "folder targets: globs of files the run leaves out entirely (not read, not in rollouts, never written)",
    "max_concurrency": "calls in flight at once (default: by workers)",
    "held_out_frac": "the share of tasks held out to measure each version",
    "patience": "stop after this many rounds without a held-out gain",
    "target_reward": "stop once the held-out reward reaches this",
    "artifact_id": "the artifact's name in the run's ledger", "self_verify": "workers test their own changes first",
    "cheap_eval_tasks": "tasks a worker tests its change on first", "seed": "the seed of the split and the sampling",
    "parallelism": "{asynchronous, lag_budget, method, executor, reissue_after, batched}; default suits most runs "
                   "(batched: true for a host agent)",
    "policies": "the gate's settings: {acceptance: {...}, staleness: {...}, ...}; default suits most runs",
    "price_per_call": "USD a call: the quote's, and the bill's for calls that report no cost",
    "price_per_1k_tokens": "USD per 1,000 tokens: the quote's, and the bill's for calls that report no cost",
    "strategy": "text targets: single (lines appended) or append (a playbook of rules)",
    "blast_radius": "skill, harness, plugin, or {glob: L0|L1|L2}; default by kind",
    "layout": "folder targets: where a rollout's agent finds the folder (claude_skill, claude_agents, "
              "agents_skill, plugin, root)",
    "name": "the skill's folder name in the layout (default the name its SKILL.md gives, else the folder's)",
    "max_files_per_diff": "folder targets: the most files one change may touch",
    "host_timeout": "seconds a host-driven rollout or reflection may wait for its answer",
    "keys_in_target": "refuse, or mask, a key's value found in the target or the tasks",
}
FIRST = ("target", "kind", "tasks", "scorer", "agent", "reflector", "prompt", "n_workers", "rounds", "budget", "frozen")
NAMED_ONLY = ("parallelism", "policies")  # nested settings with good defaults: named, not spelled out
SHORTHAND: dict[str, list[dict[str, Any]]] = {  # the string (or list) a field also takes
    "tasks": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}],
    "scorer": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    "agent": [{"type": "string"}],
}
SAME_AS = {"reflector": "agent"}  # a field written in another's forms: described, not spelled out again
_KEPT = ("type", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "items", "additionalProperties",
         "required")


def spec_schema() -> dict[str, Any]:
    """The spec argument's schema: a path string, or an object with every field of `RunSpec`."""
    full = RunSpec.model_json_schema()
    names = [*FIRST, *(name for name in full["properties"] if name not in FIRST and name != "moved")]  # what a spec needs first
    fields = {name: _field(name, full["properties"][name], full["$defs"]) for name in names}
    spec = {"type": "object", "properties": fields, "required": sorted(full.get("required", []))}
    return {"anyOf": [{"type": "string", "description": "a path to a .yaml, .yml or .json run spec"}, spec]}


def _field(path: str, prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if path in NAMED_ONLY:
        return {"type": "object", "description": DESCRIPTIONS[path]}
    if path in SAME_AS:
        return {"anyOf": [{"type": "string"}, {"type": "object"}], "description": DESCRIPTIONS[path]}
    prop = _resolved(_not_null(prop), defs)
    out: dict[str, Any] = {key: prop[key] for key in _KEPT if key in prop}
    if "anyOf" in prop:
        out["anyOf"] = [_resolved(option, defs) for option in prop["anyOf"]]
    if "properties" in prop:
        out["properties"] = {name: _field(f"{path}.{name}", p, defs) for name, p in prop["properties"].items()}
        out.pop("additionalProperties", None)  # a field that is not a spec's is named by plan's answer
    if isinstance(prop.get("default"), (str, int, float, bool)):
        out["default"] = prop["default"]
    if path in SHORTHAND:
        out = {"anyOf": [*SHORTHAND[path], out]}
    if path in DESCRIPTIONS:
        out["description"] = DESCRIPTIONS[path]
    if out.get("items", {}).get("$ref"):
        out["items"] = {"type": "object"}
    return out


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional field's schema without its `null` option, which only means "not given":
    anyOf [X, null] -> X. Where null means something else (its default is not null: `gold: null`
    is no gold column), it stays, as a type: {type: [string, null]}."""
    options = [o for o in prop.get("anyOf", []) if o != {"type": "null"}]
    if "anyOf" in prop and len(options) == 1:
        single = {**{k: v for k, v in prop.items() if k != "anyOf"}, **options[0]}
        if prop.get("default") is not None and isinstance(single.get("type"), str):
            single["type"] = [single["type"], "null"]
        return single
    if "anyOf" in prop:
        return {**prop, "anyOf": options}
    return prop


def _resolved(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`prop` with a `$ref` to a model replaced by that model's schema (its default kept)."""
    ref = prop.get("$ref")
    if not ref:
        return {k: v for k, v in prop.items() if k != "title"}
    found = defs[ref.rsplit("/", 1)[-1]]
    return {**{k: v for k, v in found.items() if k not in ("title", "description")},
            **{k: v for k, v in prop.items() if k not in ("$ref", "title")}}
