"""What a run will cost before it starts: calls (each a model call or a whole agent session), and
money when the spec gives a price.

The estimate follows the loop's shape with the spec's policies: the held-out set measured at the
start (some of it drawn again to learn whether the rewards are samples) and at the end; per round
each worker's minibatch (`task_sampler.size`, and its `scouts` spare minibatches when none fails),
up to `max_proposals` reflections a worker, each diff verified on the failure it came from (or on
`cheap_eval_tasks` tasks), the round's fusion and head probed on up to `acceptance.size` train
tasks, and, when a probe breaks, bisection (two questions a level, for at most one wave of
broken probes); held-out evaluation on the way takes at most the validation policy's `share` of the
calls (`Amortized`, a fifth by default), and at most one held-out pass a round (after its commit).
Where the blast radius gates a key a diff may change (L1), each L1 change is tested alone on up
to `acceptance.size` probes and the oracle scores it on the whole held-out set (`step.gate`), and
so may the candidate that joins the L1 changes that pass to the rest.
The low end is a run where every round proposes a little: the smallest run
(`engine.calls.smallest`), each further round a reflection a worker and one change's test; a run
that finds nothing left to fix, or whose changes break a task at their first probes (the test
stops there, and an unchanged head needs no measuring at the end), spends less. The high end is
one where every round proposes everything, breaks a whole wave, and (with gated keys) every
reflection is an L1 change that passes its test. `max_calls` caps what a run starts, so it bounds
both ends; a `max_calls` under the smallest run is refused (`smallest.refusal`). `max_tokens`
stops the run at a spend in tokens: the calls it lets start are counted at the quote's tokens a
call, a guess (a short reply is far less), so they bound the low end and, priced by the token,
the money, but not the high end of the calls: no call starts once it is reached, and the calls
running then add theirs.
Left out: the tokens of a CLI agent's session, which its own tool use decides (the per-token price,
and `max_tokens` against the estimate, are then only indicative), and rewards that are samples,
whose tests draw again where a decision hinges on a task, and L1 files a change would add where
no file the target holds is gated yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel

from agentdescent.agents.base import estimate_tokens
from agentdescent.engine.calls.smallest import MINIBATCH, Sizes, fraction_within, smallest_run
from agentdescent.engine.loop.decisions import Amortized
from agentdescent.engine.split import FEW_HELD_OUT, tasks_holding_out
from agentdescent.usage import dollars

REFLECTIONS, SCOUTS, WAVE = 2, 1, 16
TOKENS_OUT = 300  # a typical reply
CONTEXT_TOKENS = 100_000  # a prompt past this is past the context many models take
# Held-out tasks past which more buy little: two held-out rewards (means of n rewards in [0, 1]) differ by chance by
# up to 1.96 * sqrt(0.5 / n) at 95% (the worst case, unpaired), 0.098 at 200, so a gain of 0.1 stands out; the margin
# shrinks only as 1 / sqrt(n), while each task costs a rollout at the start, at the end and at every validation.
ENOUGH_HELD_OUT = 200


class Quote(BaseModel):
    calls_low: int
    calls_high: int
    calls_cap: int | None  # max_calls: no call starts past it
    calls_by_tokens: int | None = None  # the calls max_tokens lets start at tokens_per_call (those running then pass it)
    cost_low_usd: float | None = None
    cost_high_usd: float | None = None
    tokens_per_call: int
    basis: str  # how the figures were reached, in one sentence a person can check
    round_high: int = 0  # the calls of one round at the high end


def size_warnings(*, train: int, held_out: int, workers: int, held_out_frac: float, artifact_chars: int = 0,
                  minibatch: int = MINIBATCH) -> list[str]:
    """What a task set too small for the run misleads about: a held-out reward in steps too coarse to
    tell a better version from luck, and workers with no tasks of their own to learn from; and an
    artifact too large for the reflections' prompts, each of which holds all of it."""
    found = []
    if artifact_chars // 4 > CONTEXT_TOKENS:
        found.append(f"the artifact is about {artifact_chars // 4:,} tokens, and every reflection's prompt holds all of "
                     f"it: past the {CONTEXT_TOKENS:,}-token context many models take; leave out of the run what need "
                     "not change (a folder's exclude: [...]) or split it")
    if 0 < held_out < FEW_HELD_OUT:
        found.append(f"only {held_out} held-out task{'s' if held_out > 1 else ''}: {too_coarse(held_out, held_out_frac)}")
    useful = max(1, train // minibatch)
    if train > 0 and workers > useful:
        found.append(f"{workers} workers share {train} train task{'s' if train > 1 else ''}: each minibatch is "
                     f"{minibatch}, so workers past {useful} are dealt the same tasks and reflect on the same "
                     f"failures; n_workers: {useful}, or more tasks")
    return found


def too_coarse(held_out: int, held_out_frac: float) -> str:
    """Why `held_out` tasks (fewer than `FEW_HELD_OUT`) measure too coarsely, and the tasks that hold out enough."""
    enough = tasks_holding_out(FEW_HELD_OUT, held_out_frac)
    return (f"the held-out reward moves in steps of {1 / held_out:.2g}, too coarse to tell a better version from luck; "
            f"give {enough} or more tasks (held_out_frac={held_out_frac:g} holds out {FEW_HELD_OUT} of {enough})")


def held_out_warnings(sizes: Sizes, *, rounds: int, tasks: int) -> list[str]:
    """A held-out set past `ENOUGH_HELD_OUT` whose measurement at the start and the end is most of
    the quote's low end: the run would spend its calls measuring, not learning."""
    ends, low = sizes.start + sizes.held_out, low_end(sizes, rounds)
    if sizes.held_out <= ENOUGH_HELD_OUT or 2 * ends <= low:
        return []
    return [f"the held-out measurement at the start and the end takes {ends:,} of the {low:,} calls at the quote's low "
            f"end ({ends / low:.0%}): {sizes.held_out:,} held-out tasks, where {ENOUGH_HELD_OUT} are enough to tell a "
            f"gain of 0.1 from chance; held_out_frac: {plain(fraction_within(ENOUGH_HELD_OUT, tasks))} holds out at most "
            f"{ENOUGH_HELD_OUT} of the {tasks:,} tasks and leaves the calls to the rounds"]


def plain(fraction: float) -> str:
    """A fraction as YAML and a reader take it, with no exponent: plain(2e-05) == "0.00002" """
    return f"{fraction:.12f}".rstrip("0").rstrip(".") or "0"


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


def budget_warnings(*, cost: Quote, sizes: Sizes, max_tokens: int | None, rounds: int) -> list[str]:
    """What bounds the bill where no `max_calls` does, and what a budget that can run still falls
    short of: a first round at the high end (the run may commit nothing), the rounds a `max_calls`
    under the low end pays for, and a `max_tokens` under the smallest run at the estimated tokens a call."""
    found = uncapped_warnings(cost, max_tokens=max_tokens)
    ends = sizes.start + sizes.held_out
    if cost.calls_cap is not None and cost.calls_cap < ends + cost.round_high:
        found.append(f"max_calls={cost.calls_cap:,} leaves {cost.calls_cap - ends:,} calls for the rounds after the "
                     f"{ends:,} held-out rollouts, and a first round takes {sizes.first_round:,} calls (one change "
                     f"tested) to {cost.round_high:,} (every reflection, a wave of broken probes bisected): the run may "
                     f"stop before it commits anything; {ends + cost.round_high:,} pays for the first round at the high end")
    if cost.calls_cap is not None:
        afforded = rounds_afforded(sizes, cost.calls_cap)
        if afforded < rounds:
            full = low_end(sizes, rounds)
            found.append(f"max_calls={cost.calls_cap:,} affords at most {afforded} of the {rounds} rounds (after "
                         f"{sizes.start + sizes.held_out:,} held-out rollouts, the first round takes at least "
                         f"{sizes.first_round:,} calls and each further one {sizes.later_round:,}); {full:,} would pay "
                         f"for all {rounds}")
    least = smallest_run(sizes) * cost.tokens_per_call
    if max_tokens is not None and max_tokens < least:
        found.append(f"max_tokens={max_tokens:,} is below the about {least:,} tokens the smallest run takes at about "
                     f"{cost.tokens_per_call:,} tokens a call: the run may stop before its first round ends (the "
                     "estimate is rough: replies and an agent's tool use decide it)")
    return found


def quote(sizes: Sizes, *, rounds: int, artifact_chars: int, prompt_chars: int, max_calls: int | None,
          price_per_call: float | None, price_per_1k_tokens: float | None, max_tokens: int | None = None,
          reflections: int = REFLECTIONS, scouts: int = SCOUTS, wave: int = WAVE, cheap_eval_tasks: int | None = None,
          calibrate_train: bool = False, gated: bool = False, share: float = Amortized.share) -> Quote:
    """The range of calls a run takes, and its cost when a price is given; `reflections`: at most a
    worker's; `calibrate_train`: the start draws train tasks again too (a batched run with no cap);
    `gated`: the blast radius makes a key a diff may change L1; `share`: the most of the calls
    held-out evaluation on the way may take."""
    probes, workers = sizes.tested, sizes.workers
    levels = math.ceil(math.log2(max(2, workers * reflections)))
    verified = cheap_eval_tasks or 1  # each diff on its failure, or on cheap_eval_tasks tasks
    alone = workers * reflections + 1 if gated else 0  # each L1 change, and the candidate that joins those that pass
    high_round = (workers * (sizes.minibatch * (1 + scouts) + reflections * (1 + verified)) + 2 * probes
                  + min(wave, probes) * 2 * levels + alone * (probes + sizes.held_out))
    drawn = min(sizes.calibration, sizes.held_out + sizes.train) - min(sizes.calibration, sizes.held_out) \
        if calibrate_train else 0  # train tasks the start draws too
    low = low_end(sizes, rounds) + drawn
    rest = sizes.start + drawn + sizes.held_out + rounds * high_round
    on_the_way = rounds * sizes.held_out  # a pass a round at most, after its commit
    if share < 1:  # and each keeps the measurements at most `share` of all the calls: v <= share * (rest + v)
        on_the_way = min(on_the_way, math.ceil(rest * share / (1 - share)))
    high = rest + on_the_way
    tokens = (artifact_chars + prompt_chars) // 4 + TOKENS_OUT
    by_tokens = -(-max_tokens // tokens) if max_tokens is not None else None  # a call starts while the spend is under it
    for cap in (max_calls, by_tokens):
        if cap is not None:
            low = min(low, cap)
    if max_calls is not None:
        high = min(high, max_calls)

    def cost(calls: int, *, top: bool = False) -> float | None:
        if price_per_call is not None:
            return round(calls * price_per_call, 4)
        if price_per_1k_tokens is not None:  # priced by the token, max_tokens bounds the money itself
            return round((min(calls, by_tokens) if top and by_tokens is not None else calls) * tokens / 1000
                         * price_per_1k_tokens, 4)
        return None

    again = min(sizes.calibration, sizes.held_out) + drawn
    basis = (f"{sizes.held_out} held-out rollouts at the start (and {again} drawn again) and {sizes.held_out} at the "
             f"end; per round {workers} workers x ({sizes.minibatch} rollouts, up to {sizes.minibatch * scouts} "
             f"scouted, up to {reflections} reflections, each verified on "
             + (f"{cheap_eval_tasks} tasks" if cheap_eval_tasks else "its failure")
             + f"), the fusion and head on up to {probes} probes, bisection of up to {min(wave, probes)} broken "
             f"probes"
             + (f", each of up to {alone - 1} L1 changes alone (and the candidate that joins those that pass) on up to "
                f"{probes} probes and the {sizes.held_out} held-out tasks (the L1 gate's oracle)" if gated else "")
             + f"; held-out evaluation on the way at most {share:.0%} of the calls and a pass a round; {rounds} rounds (the smallest "
             f"run, both held-out measurements and one round at the low end: {smallest_run(sizes)} calls)"
             + (f", capped by max_calls={max_calls}" if max_calls is not None else "")
             + (f", max_tokens={max_tokens} at about {tokens} tokens a call ({by_tokens} calls, and the calls running when "
                "it is reached; a guess, which caps the low end" + (" and the money" if price_per_1k_tokens is not None
                                                                   and price_per_call is None else "") + ")"
                if by_tokens is not None else ""))
    return Quote(calls_low=low, calls_high=high, calls_cap=max_calls, calls_by_tokens=by_tokens, cost_low_usd=cost(low),
                 cost_high_usd=cost(high, top=True), tokens_per_call=tokens, basis=basis, round_high=high_round)


def money(cost: Quote) -> str | None:
    """The quote's range of money, as `plan` says it everywhere ("$20.93-$66.65"), or None without a price."""
    if cost.cost_low_usd is None or cost.cost_high_usd is None:
        return None
    return f"{dollars(cost.cost_low_usd)}-{dollars(cost.cost_high_usd)}"


def uncapped_warnings(cost: Quote, *, max_tokens: int | None) -> list[str]:
    """What bounds the bill where no `max_calls` does: `max_tokens` (in tokens: the calls it lets
    start are only as good as the quote's tokens a call), or the rounds alone."""
    if cost.calls_cap is not None:
        return []
    if max_tokens is None or cost.calls_by_tokens is None:
        return ["no budget.max_calls: only rounds bound the bill; set budget: {max_calls: N} to cap it"]
    return [f"no budget.max_calls: max_tokens={max_tokens:,} bounds the bill, in tokens: about {cost.calls_by_tokens:,} "
            f"calls at the quote's rough {cost.tokens_per_call:,} tokens a call, and the calls running when it is "
            "reached add theirs; set budget: {max_calls: N} to cap the calls too"]


def low_end(sizes: Sizes, rounds: int) -> int:
    """The calls of a run where every round proposes a little: the smallest run, and each further
    round at the least."""
    return smallest_run(sizes) + (rounds - 1) * sizes.later_round


def rounds_afforded(sizes: Sizes, max_calls: int) -> int:
    """The rounds `max_calls` pays for at the low end (0: not even the smallest run)."""
    if max_calls < smallest_run(sizes):
        return 0
    return 1 + (max_calls - smallest_run(sizes)) // sizes.later_round
