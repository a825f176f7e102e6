"""The one typed description of a run, and the only defaults in the project.

`evolve()` takes the keywords its quickstarts use and these objects for the rest; a run spec is
the same `Settings` with the spec's own fields beside them (`runs.spec.RunSpec`), so every option
`evolve` has is a spec field, and the CLI and the MCP server reach them all:

    Budget        what the run may spend: calls, tokens, and seconds for one rollout or reflection
    Parallelism   how the workers divide the work (a barrier or none, dp / tp / pp) and where calls run
    Policies      the decisions of the loop (`engine.loop.decisions`) and of the optimizer step
                  (`step.policies`), bundled; `PolicySettings` is the same as data, for a spec
    Settings      every option of a run that is data, with its default: what `evolve` reads its
                  defaults from, and what the run store's runner hands it (`evolve_options`)

Stop rules beside `rounds`, `patience` and `target_reward` are objects passed to `evolve(stop=[...])`
(`engine.loop.stopping`). Every check raises `UserError` naming the field and the fix, so that a
spec lists it as a problem and `evolve` refuses it before anything runs.

Left out: what each option does (the modules that read it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentdescent.engine.calls.pools import EXECUTORS
from agentdescent.engine.loop.decisions import (
    Amortized,
    FailuresFirst,
    OnHeldOutGain,
    PromotionPolicy,
    ProposalPolicy,
    TaskSampler,
    ValidationPolicy,
    WorstFirst,
)
from agentdescent.engine.loop.parallel import ParallelMethod, parallel_method
from agentdescent.errors import UserError
from agentdescent.governance.paths import unsafe_key_reason
from agentdescent.step.changes import Approve
from agentdescent.step.policies import AcceptancePolicy, BetaAcceptance, BetterEvidence, ConflictPolicy, FusionPolicy, ThreeWayMerge
from agentdescent.step.staleness import Staleness, StalenessPolicy


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What a run may spend, as caps: no call starts once `max_calls` or `max_tokens` is spent,
    counted across every process of the run (a killed run resumed goes on from its bill).
    `rollout_timeout` bounds one rollout (its agent and its scorer together) or one reflection, in
    seconds; one that takes longer is a failed rollout or an `error` outcome, and the calls it
    makes through the shipped clients end with it. None: no cap."""

    max_calls: int | None = None
    max_tokens: int | None = None
    rollout_timeout: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UserError(f"Budget({name}=...) must be a positive whole number or None; got {value!r}")
        timeout = self.rollout_timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not math.isfinite(timeout) or timeout <= 0):
            raise UserError(f"Budget(rollout_timeout=...) must be a number of seconds above 0, or None; got {timeout!r}")


BATCHED_WAVE = 128  # a batched run's calls in flight and workspaces: a whole wave, since a wave past them is two round trips


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    """How the workers divide the work, and where the calls run.

    `asynchronous`: no barrier; each worker starts its next turn on the newest snapshot once its
    report is taken into a step, and `lag_budget` (None: no limit) bounds how many commits behind
    head an admitted diff may be made (`Policies.staleness` says what becomes of one past it).
    `method`: "dp" (every worker may change every key), "tp" or `TensorParallel(route=...)` (the
    keys dealt out, one shard a worker), "pp" or `PipelineParallel(...)` (a turn's stages on pools of
    their own): `engine.loop.parallel`. `executor`: "thread", "process" or "ray" (`engine.calls`).
    `reissue_after`: a rollout still running past that many times its task's usual duration is run
    a second time and the first answer wins (both are paid for); None: never. `batched`: the calls
    are answered in batches (a host's helpers take a wave at a time), so each wave costs a round
    trip and the run makes fewer: a held-out measurement is one wave, sent beside the next round's
    rollouts; a round's workers reflect together once all have rolled out; with no `max_calls`,
    the start's wave draws train tasks too to find out whether rewards are samples; the call pool
    holds a whole wave (a spec whose agent or reflector is `host` is batched unless it says
    otherwise)."""

    asynchronous: bool = False
    lag_budget: int | None = 3
    method: str | ParallelMethod = "dp"
    executor: str = "thread"
    reissue_after: float | None = 4.0
    batched: bool = False

    def __post_init__(self) -> None:
        for name in ("asynchronous", "batched"):
            if not isinstance(getattr(self, name), bool):  # "false" would read as True
                raise UserError(f"Parallelism({name}=...) must be True or False; got {getattr(self, name)!r}")
        object.__setattr__(self, "method", parallel_method(self.method))
        if self.lag_budget is not None and (isinstance(self.lag_budget, bool) or not isinstance(self.lag_budget, int)
                                            or self.lag_budget < 0):
            raise UserError(f"Parallelism(lag_budget=...) must be a whole number of commits >= 0, or None; "
                            f"got {self.lag_budget!r}")
        if self.executor not in EXECUTORS:
            raise UserError(f"Parallelism(executor={self.executor!r}) is not available; choose one of "
                            f"{', '.join(EXECUTORS)}")
        after = self.reissue_after
        if after is not None and (isinstance(after, bool) or not isinstance(after, (int, float)) or not after > 1):
            raise UserError(f"Parallelism(reissue_after=...) must be a number above 1 (times a task's usual "
                            f"duration), or None; got {after!r}")


@dataclass(frozen=True, kw_only=True)
class Policies:
    """Every decision of the loop and of the optimizer step, each a Protocol with a shipped default;
    replace any one with keywords or `dataclasses.replace`. `approve`: a person's yes for an L1
    (gated) change once it passed the stricter bar (`step.gate`; None: the bar alone)."""

    task_sampler: TaskSampler = field(default_factory=FailuresFirst)
    proposal: ProposalPolicy = field(default_factory=WorstFirst)
    staleness: StalenessPolicy = field(default_factory=Staleness)
    conflict: ConflictPolicy = field(default_factory=BetterEvidence)
    fusion: FusionPolicy = field(default_factory=ThreeWayMerge)
    acceptance: AcceptancePolicy = field(default_factory=BetaAcceptance)
    validation: ValidationPolicy = field(default_factory=Amortized)
    promotion: PromotionPolicy = field(default_factory=OnHeldOutGain)
    approve: Approve | None = None


class PolicySettings(BaseModel):
    """The shipped policies' settings, as data (a spec's `policies:`): each slot holds its shipped
    policy's fields, e.g. `{acceptance: {confidence: 0.9, size: 48}, staleness: {how: rebase}}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_sampler: FailuresFirst = FailuresFirst()
    proposal: WorstFirst = WorstFirst()
    staleness: Staleness = Staleness()
    acceptance: BetaAcceptance = BetaAcceptance()
    validation: Amortized = Amortized()
    promotion: OnHeldOutGain = OnHeldOutGain()

    def build(self, **more: Any) -> Policies:
        """The `Policies` these settings describe; `more` adds what data cannot hold (an approver)."""
        return Policies(task_sampler=self.task_sampler, proposal=self.proposal, staleness=self.staleness,
                        acceptance=self.acceptance, validation=self.validation, promotion=self.promotion, **more)


class Settings(BaseModel):
    """Every option of a run that is data, with the project's defaults (see the module docstring);
    `evolve` documents each."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN or infinity: named as such, not as past a bound

    rounds: int = Field(default=8, ge=1, le=10_000)
    n_workers: int = Field(default=4, ge=1, le=256)
    max_concurrency: int | None = Field(default=None, ge=1)
    held_out_frac: float = Field(default=0.3, ge=0, lt=1)
    patience: int | None = Field(default=None, ge=1)
    target_reward: float | None = Field(default=None, ge=0, le=1)
    artifact_id: str = Field(default="artifact", min_length=1)
    self_verify: bool = True
    cheap_eval_tasks: int | None = Field(default=None, ge=1)
    seed: int = 0
    budget: Budget = Budget()
    parallelism: Parallelism = Parallelism()
    policies: PolicySettings = PolicySettings()

    @field_validator("rounds", "n_workers", "max_concurrency", "held_out_frac", "patience", "target_reward",
                     "cheap_eval_tasks", "seed", mode="before")
    @classmethod
    def _no_flag_for_a_number(cls, value: Any) -> Any:
        """`rounds: true` is a slip, not one round (pydantic reads a bool as 0 or 1)."""
        if isinstance(value, bool):
            raise ValueError(f"is {str(value).lower()}, a yes or no, where a number goes")
        return value

    @field_validator("artifact_id")
    @classmethod
    def _one_folder_name(cls, value: str) -> str:
        """The ledger keeps the artifact in a folder of this name."""
        if "/" in value or unsafe_key_reason(value):
            raise ValueError(f"{value!r} is not one folder name; use a name like 'prompt'")
        return value

    def evolve_options(self, **more: Any) -> dict[str, Any]:
        """These settings as `evolve`'s keywords, the objects built; `more` (an approver) joins the policies."""
        return {"rounds": self.rounds, "n_workers": self.n_workers, "max_concurrency": self.max_concurrency,
                "held_out_frac": self.held_out_frac, "patience": self.patience, "target_reward": self.target_reward,
                "artifact_id": self.artifact_id, "self_verify": self.self_verify,
                "cheap_eval_tasks": self.cheap_eval_tasks, "seed": self.seed, "budget": self.budget,
                "parallelism": self.parallelism, "policies": self.policies.build(**more)}


DEFAULTS = Settings()
