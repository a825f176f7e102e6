"""GEPA (gepa==0.1.4) on the noisy reference domain: the peer that bench/noisy_gate.py runs in its
own environment (bench/.gepa-venv, made by that script), never a dependency of agentdescent.

GEPA is driven through its adapter API, `gepa.optimize(seed_candidate, trainset, valset, adapter,
max_metric_calls, seed, logger)`, with an adapter of ours, so that no model is needed:

- a candidate is {"playbook": text}, the text an `AppendRules` rendering ("- rule" a line), which
  the domain's solver reads as it reads the rendering `evolve` hands it;
- `evaluate` rolls out each task of the batch (a slept rollout, `domain.run`, then
  `domain.reward`), the batch's tasks at once on threads;
- `make_reflective_dataset` keeps the failures;
- `propose_new_texts` asks the domain's reflector (a slept reflection) once, on the first failure,
  and applies its proposal as `AppendRules` does (append the rule, "remove: <rule>" drops it). A
  proposal that leaves the text as it was (a rule already there, a removal of a rule that is not)
  returns no text, which GEPA reads as "no proposal" and does not roll out.

Since the adapter proposes, `optimize` asks for no reflection LM and none is passed. The calls
are counted here (rollouts and reflections), not read off GEPA's counter, which counts rollouts
only; its own `total_metric_calls` is returned beside them.

Input: one JSON object on stdin, {"levels": {...NoisyLevels}, "seed": 0, "train": [task ids],
"held_out": [task ids], "budget": 300, "rollout_ms": 20, "reflect_ms": 40}.
Output: one JSON line on stdout: calls, rollouts, reflections, metric_calls (GEPA's), candidates,
the best candidate's text (`best`), the calls spent when GEPA began its valset evaluation
(`found_at`: what finding it cost, the budget being spent whatever happens), its valset score and
the seed's (`measured`), and seconds.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gepa import optimize
from gepa.core.adapter import EvaluationBatch

from agentdescent import AppendRules
from agentdescent.artifacts.strategies import rule_key
from agentdescent.errors import InvalidProposal
from agentdescent.testing.noisy import NoisyDomain, NoisyLevels
from agentdescent.types import Task

COMPONENT = "playbook"


class NoisyAdapter:
    """A `GEPAAdapter` over `NoisyDomain`: see the module docstring."""

    def __init__(self, domain: NoisyDomain, rollout_s: float, reflect_s: float) -> None:
        self.domain, self.rollout_s, self.reflect_s = domain, rollout_s, reflect_s
        self.strategy = AppendRules()
        self.rollouts = self.reflections = 0
        self.valset_size = 0
        self.found_at: dict[str, int] = {}  # a candidate's text -> the calls spent when its valset evaluation began
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=32)

    def evaluate(self, batch: list[Task], candidate: dict[str, str], capture_traces: bool = False) -> EvaluationBatch:
        text = candidate[COMPONENT]
        if len(batch) == self.valset_size:  # a valset evaluation (minibatches are of 3)
            self.found_at.setdefault(text, self.rollouts + self.reflections)

        def rollout(task: Task) -> tuple[str, float]:
            time.sleep(self.rollout_s)
            output = self.domain.run(text, task)
            with self._lock:
                self.rollouts += 1
            return output, self.domain.reward(task, output)

        done = list(self._pool.map(rollout, batch))
        outputs, scores = [o for o, _ in done], [s for _, s in done]
        traces = [{"task": t, "output": o, "reward": s} for t, (o, s) in zip(batch, done)] if capture_traces else None
        return EvaluationBatch(outputs=outputs, scores=scores, trajectories=traces)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> dict[str, list[dict]]:
        failures = [t for t in eval_batch.trajectories or [] if t["reward"] < 1.0]
        return {name: failures for name in components_to_update}

    def propose_new_texts(self, candidate: dict[str, str], reflective_dataset: dict[str, list[dict]],
                          components_to_update: list[str]) -> dict[str, str]:
        failures = reflective_dataset.get(COMPONENT) or []
        if not failures:
            return {}
        first, text = failures[0], candidate[COMPONENT]
        time.sleep(self.reflect_s)
        with self._lock:
            self.reflections += 1
        proposal = self.domain.propose(text, first["task"], first["output"], first["reward"])
        changed = self.apply(text, proposal)
        return {COMPONENT: changed} if changed != text else {}

    def apply(self, text: str, proposal: str | None) -> str:
        """`proposal` applied to the playbook `text` as `AppendRules` applies it, rendered again."""
        if proposal is None:
            return text
        rules = [line.strip().removeprefix("- ").strip() for line in text.splitlines() if line.strip()]
        state = {rule_key(r): r for r in rules}
        try:
            edits = self.strategy.edits_for(state, proposal)
        except InvalidProposal:
            return text
        for edit in edits:
            if edit.after is None:
                state.pop(edit.key, None)
            else:
                state[edit.key] = edit.after
        return self.strategy.render(state)


class Quiet:
    """GEPA's logger: its lines go to stderr, stdout is kept for the one result line."""

    def log(self, message: str) -> None:
        print(message, file=sys.stderr)


def main() -> None:
    ask = json.loads(sys.stdin.read())
    domain = NoisyDomain(NoisyLevels(**ask["levels"]), seed=ask["seed"])
    by_id = {t.id: t for t in domain.tasks()}
    train, held_out = [by_id[i] for i in ask["train"]], [by_id[i] for i in ask["held_out"]]
    adapter = NoisyAdapter(domain, ask["rollout_ms"] / 1000, ask["reflect_ms"] / 1000)
    adapter.valset_size = len(held_out)
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        result = optimize(seed_candidate={COMPONENT: ""}, trainset=train, valset=held_out, adapter=adapter,
                          max_metric_calls=ask["budget"], seed=ask["seed"], logger=Quiet())
    seconds = time.perf_counter() - start
    best = result.best_candidate
    best_text = best[COMPONENT] if isinstance(best, dict) else best
    scores = result.val_aggregate_scores
    print(json.dumps({"calls": adapter.rollouts + adapter.reflections, "rollouts": adapter.rollouts,
                      "reflections": adapter.reflections, "metric_calls": result.total_metric_calls,
                      "candidates": result.num_candidates, "best": best_text, "found_at": adapter.found_at.get(best_text),
                      "measured": [scores[0], scores[result.best_idx]], "seconds": seconds}))


if __name__ == "__main__":
    main()
