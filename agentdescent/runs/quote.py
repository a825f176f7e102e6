"""What a run will cost before it starts: calls (each a model call or a whole agent session), and
money when the spec gives a price.

The estimate follows the loop's shape with the shipped policies: the held-out set measured at the
start and at the end; per round each worker's minibatch (4 tasks, up to 4 more scouted when
none fails), up to 2 reflections a worker, each diff verified on the failure it came from, the
round's fusion and head probed on up to 32 train tasks, and, when a probe breaks, bisection (two
questions a level, for at most one wave of 16 broken probes); held-out evaluation on the way
takes at most a fifth of the calls (`Amortized`). The low end is a run where little is proposed;
the high end one where every round proposes everything and breaks a whole wave. `max_calls`
caps what a run starts, so it bounds the high end. Left out: the tokens of a CLI agent's
session, which its own tool use decides (the per-token price is then only indicative).
"""

from __future__ import annotations

import math

from pydantic import BaseModel

MINIBATCH, SCOUTED, REFLECTIONS, SAMPLE, WAVE, SHARE = 4, 4, 2, 32, 16, 0.2
TOKENS_OUT = 300  # a typical reply


class Quote(BaseModel):
    calls_low: int
    calls_high: int
    calls_cap: int | None  # max_calls: no call starts past it
    cost_low_usd: float | None = None
    cost_high_usd: float | None = None
    tokens_per_call: int
    basis: str  # how the figures were reached, in one sentence a person can check


def quote(*, train: int, held_out: int, workers: int, rounds: int, artifact_chars: int, prompt_chars: int,
          max_calls: int | None, price_per_call: float | None, price_per_1k_tokens: float | None) -> Quote:
    """The range of calls a run takes, and its cost when a price is given."""
    sample = min(SAMPLE, train)
    levels = math.ceil(math.log2(max(2, workers * REFLECTIONS)))
    low_round = workers * (MINIBATCH + 1)
    high_round = workers * (MINIBATCH + SCOUTED + 2 * REFLECTIONS) + 2 * sample + min(WAVE, sample) * 2 * levels
    low = 2 * held_out + rounds * low_round
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

    basis = (f"{held_out} held-out rollouts at the start and at the end; per round {workers} workers x ({MINIBATCH} "
             f"rollouts, up to {SCOUTED} scouted, up to {REFLECTIONS} reflections, each verified on its failure), "
             f"the fusion and head on up to {sample} probes, bisection of up to {min(WAVE, sample)} broken probes; "
             f"held-out evaluation on the way at most {SHARE:.0%} of the calls; {rounds} rounds"
             + (f", capped by max_calls={max_calls}" if max_calls is not None else ""))
    return Quote(calls_low=low, calls_high=high, calls_cap=max_calls, cost_low_usd=cost(low), cost_high_usd=cost(high),
                 tokens_per_call=tokens, basis=basis)
