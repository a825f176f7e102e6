"""What a run will cost before it starts: calls (each a model call or a whole agent session), and
money when the spec gives a price.

The estimate follows the loop's shape with the shipped policies: the held-out set measured at the
start and at the end; per round each worker's minibatch (4 tasks, up to 4 more scouted when
none fails), up to `max_proposals` reflections a worker (2 unless the spec says otherwise), each
diff verified on the failure it came from, the round's fusion and head probed on up to 32 train
tasks, and, when a probe breaks, bisection (two questions a level, for at most one wave of 16
broken probes); held-out evaluation on the way takes at most a fifth of the calls (`Amortized`).
The low end is a run where little is proposed; the high end one where every round proposes
everything and breaks a whole wave. `max_calls` caps what a run starts, so it bounds the high end; the smallest run (`smallest_run`: both
held-out measurements and one round at the low end) bounds it from below, and a `max_calls` under
it is refused (`refusal`), since such a run stops before it can learn anything. Left out: the
tokens of a CLI agent's session, which its own tool use decides (the per-token price, and
`max_tokens` against the estimate, are then only indicative).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel

from agentdescent.agents.base import estimate_tokens

MINIBATCH, SCOUTED, REFLECTIONS, SAMPLE, WAVE, SHARE = 4, 4, 2, 32, 16, 0.2
TOKENS_OUT = 300  # a typical reply
CONTEXT_TOKENS = 100_000  # a prompt past this is past the context many models take
FEW_HELD_OUT = 4  # held-out tasks below which the held-out reward is too coarse to mean much


class Quote(BaseModel):
    calls_low: int
    calls_high: int
    calls_cap: int | None  # max_calls: no call starts past it
    cost_low_usd: float | None = None
    cost_high_usd: float | None = None
    tokens_per_call: int
    basis: str  # how the figures were reached, in one sentence a person can check


def smallest_run(*, held_out: int, workers: int) -> int:
    """The fewest calls a run that can learn anything takes: the held-out set measured at the start
    and at the end, and one round at the low end. smallest_run(held_out=25, workers=4) == 70 (2 x 25 + 4 x 5)"""
    return 2 * held_out + _low_round(workers)


def refusal(*, max_calls: int | None, held_out: int, tasks: int, workers: int) -> str | None:
    """Why `max_calls` cannot pay for the smallest run, with the budget that can and the other ways
    out (fewer tasks held out, fewer workers); None when it can, or when there is no cap."""
    least = smallest_run(held_out=held_out, workers=workers)
    if max_calls is None or max_calls >= least:
        return None
    ways = [f"Give max_calls of at least {least:,}"]
    fewer_workers = (max_calls - 2 * held_out) // _low_round(1)
    if 1 <= fewer_workers < workers:
        ways.append(f"run at most {fewer_workers} worker{'s' if fewer_workers > 1 else ''}")
    fewer_held = (max_calls - _low_round(workers)) // 2
    if fewer_held >= 1:
        ways.append(f"hold out at most {fewer_held:,} of the {tasks:,} tasks "
                    f"(held_out_frac={_fraction_within(fewer_held, tasks):g})")
    return (f"max_calls={max_calls:,} is below the smallest run, {least:,} calls: the {held_out:,} held-out tasks "
            f"measured at the start and at the end ({2 * held_out:,}) and one round of {workers} workers "
            f"({_low_round(workers):,}); such a run stops before it can learn anything. "
            + ", or ".join(ways))


def size_warnings(*, train: int, held_out: int, workers: int, artifact_chars: int = 0) -> list[str]:
    """What a task set too small for the run misleads about: a held-out reward in steps too coarse to
    tell a better version from luck, and workers with no tasks of their own to learn from; and an
    artifact too large for the reflections' prompts, each of which holds all of it."""
    found = []
    if artifact_chars // 4 > CONTEXT_TOKENS:
        found.append(f"the artifact is about {artifact_chars // 4:,} tokens, and every reflection's prompt holds all of "
                     f"it: past the {CONTEXT_TOKENS:,}-token context many models take; leave out of the run what need "
                     "not change (a folder's exclude: [...]) or split it")
    if 0 < held_out < FEW_HELD_OUT:
        found.append(f"only {held_out} held-out task{'s' if held_out > 1 else ''}: the held-out reward moves in steps "
                     f"of {1 / held_out:.2g}, too coarse to tell a better version from luck; give {4 * FEW_HELD_OUT} or "
                     "more tasks (held_out_frac decides the share held out)")
    useful = max(1, train // MINIBATCH)
    if train > 0 and workers > useful:
        found.append(f"{workers} workers share {train} train task{'s' if train > 1 else ''}: each minibatch is "
                     f"{MINIBATCH}, so workers past {useful} are dealt the same tasks and reflect on the same "
                     f"failures; n_workers: {useful}, or more tasks")
    return found


def whole_file_warnings(files: Mapping[str, str], *, reply_limit: int | None, reflector: str) -> list[str]:
    """A reflection that changes a folder's file gives it back whole: where the largest of the
    `files` it may change does not fit in `reply_limit` tokens, every such reply is cut at that
    limit (and refused)."""
    if reply_limit is None or not files:
        return []
    path, text = max(files.items(), key=lambda item: len(item[1]))
    tokens = estimate_tokens(text)
    if tokens <= reply_limit:
        return []
    enough = math.ceil(2 * tokens / 1000) * 1000
    return [f"{path} is about {tokens:,} tokens, more than the {reply_limit:,} a reply of the reflector ({reflector}) "
            f"may hold: a reflection that changes it gives it back whole, and that reply would be cut off and refused; "
            f"set the reflector's options: {{max_tokens: {enough}}}, or leave the file out (exclude: [...])"]


def budget_warnings(*, cost: Quote, max_tokens: int | None, held_out: int, workers: int, rounds: int) -> list[str]:
    """What a budget that can run still falls short of: the rounds a `max_calls` under the low end
    pays for, and a `max_tokens` under the smallest run at the estimated tokens a call."""
    found = []
    if cost.calls_cap is not None:
        afforded = (cost.calls_cap - 2 * held_out) // _low_round(workers)
        if afforded < rounds:
            full = low_end(held_out=held_out, workers=workers, rounds=rounds)
            found.append(f"max_calls={cost.calls_cap:,} affords at most {afforded} of the {rounds} rounds (after "
                         f"{2 * held_out:,} held-out rollouts, a round takes at least {_low_round(workers):,} calls); "
                         f"{full:,} would pay for all {rounds}")
    least = smallest_run(held_out=held_out, workers=workers) * cost.tokens_per_call
    if max_tokens is not None and max_tokens < least:
        found.append(f"max_tokens={max_tokens:,} is below the about {least:,} tokens the smallest run takes at about "
                     f"{cost.tokens_per_call:,} tokens a call: the run may stop before its first round ends (the "
                     "estimate is rough: replies and an agent's tool use decide it)")
    return found


def quote(*, train: int, held_out: int, workers: int, rounds: int, artifact_chars: int, prompt_chars: int,
          max_calls: int | None, price_per_call: float | None, price_per_1k_tokens: float | None,
          reflections: int = REFLECTIONS) -> Quote:
    """The range of calls a run takes, and its cost when a price is given; `reflections`: at most a worker's."""
    sample = min(SAMPLE, train)
    levels = math.ceil(math.log2(max(2, workers * reflections)))
    high_round = workers * (MINIBATCH + SCOUTED + 2 * reflections) + 2 * sample + min(WAVE, sample) * 2 * levels
    least = smallest_run(held_out=held_out, workers=workers)
    low = low_end(held_out=held_out, workers=workers, rounds=rounds)
    high = math.ceil((2 * held_out + rounds * high_round) / (1 - SHARE))
    if max_calls is not None:
        low, high = min(low, max_calls), min(high, max_calls)
    tokens = (artifact_chars + prompt_chars) // 4 + TOKENS_OUT

    def cost(calls: int) -> float | None:
        if price_per_call is not None:
            return round(calls * price_per_call, 4)
        if price_per_1k_tokens is not None:
            return round(calls * tokens / 1000 * price_per_1k_tokens, 4)
        return None

    basis = (f"{held_out} held-out rollouts at the start and {held_out} at the end; per round {workers} workers x "
             f"({MINIBATCH} rollouts, up to {SCOUTED} scouted, up to {reflections} reflections, each verified on its "
             f"failure), the fusion and head on up to {sample} probes, bisection of up to {min(WAVE, sample)} broken "
             f"probes; held-out evaluation on the way at most {SHARE:.0%} of the calls; {rounds} rounds (the smallest "
             f"run, both held-out measurements and one round at the low end: {least} calls)"
             + (f", capped by max_calls={max_calls}" if max_calls is not None else ""))
    return Quote(calls_low=low, calls_high=high, calls_cap=max_calls, cost_low_usd=cost(low), cost_high_usd=cost(high),
                 tokens_per_call=tokens, basis=basis)


def _low_round(workers: int) -> int:
    """A round where little is proposed: each worker's minibatch and one reflection."""
    return workers * (MINIBATCH + 1)


def low_end(*, held_out: int, workers: int, rounds: int) -> int:
    """The calls of a run where little is proposed: the smallest run, and each further round at the low end."""
    return smallest_run(held_out=held_out, workers=workers) + (rounds - 1) * _low_round(workers)


def _fraction_within(count: int, total: int) -> float:
    """The largest held_out_frac of two significant digits that holds at most `count` of `total` tasks
    out (the split rounds `total * frac`): _fraction_within(15, 84) == 0.17"""
    exact = count / total
    scale = 10 ** (1 - math.floor(math.log10(exact)))
    return math.floor(exact * scale) / scale
