"""How many hours a run needs from a training plan: the one decider (pure).

Every command that sizes or judges capacity asks `capacity_need` (through
`blackwell_sm.api.capacity`): `bsm plans search`, `reserve`, `describe --spec`, `extend` (every
form), `training_plan: auto`, `submit` and `--until-done`. A plan is bought for the high end
of the predicted hours range (extensions cannot be cancelled, and a plan too short stops the
run), plus the start-up, plus the time before a plan's end when its instances are reclaimed.
So a plan that `search` sized and `reserve` bought is the plan `submit` accepts for the spec.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.planner.plan import Plan, RunEstimate

STARTUP_HOURS = 0.5  # image pull, channel download, checkpoint load and final save
RECLAIM_HOURS = 0.5  # instances start terminating about 30 minutes before a plan ends
ESTIMATE: Literal["high"] = "high"
WHY = (
    "the high end of the predicted hours range: a plan cannot be cancelled or shortened, and "
    "one too short stops the run, so capacity is sized for the slow case"
)


class CapacityNeed(BaseModel):
    """What a run needs from a training plan, and which estimate that rests on."""

    model_config = ConfigDict(extra="forbid")

    estimate: Literal["high"] = Field(
        description="Which estimate of the run's hours: the range's high end."
    )
    why: str = Field(description="Why that estimate, in words.")
    run_hours: float = Field(description="The run's hours at that estimate (the steps left).")
    central_hours: float = Field(description="The central prediction, for comparison.")
    startup_hours: float = Field(description="Image pull, downloads, checkpoint load and save.")
    reclaim_hours: float = Field(description="Instances are reclaimed this long before the end.")
    needed_hours: float = Field(description="run + start-up: what must end before the reclaim.")
    plan_hours: int = Field(
        description="The plan to search for and buy: run + start-up + reclaim, whole hours up."
    )
    steps_left: float = Field(1.0, description="The fraction of the run still to do.")

    def describe(self) -> str:
        left = "" if self.steps_left >= 1 else f" for the {self.steps_left:.0%} of steps left"
        return (
            f"{self.plan_hours} h: the run's {self.run_hours:.1f} h{left} (the range's high end; "
            f"central {self.central_hours:.1f} h) + {self.startup_hours:g} h start-up + "
            f"{self.reclaim_hours:g} h reclaimed before a plan ends"
        )


def fraction_left(run: RunEstimate, done_steps: int) -> float:
    """The fraction of `run`'s steps still to do after `done_steps` (a later job of a run)."""
    if not done_steps or not run.steps:
        return 1.0
    return max(0.0, 1 - done_steps / run.steps)


def capacity_need(plan: Plan, *, done_steps: int = 0) -> CapacityNeed:
    """The hours `plan`'s run needs from a training plan; `done_steps` (a later job of a run)
    counts only the steps left."""
    left = fraction_left(plan.run, done_steps)
    run = plan.run.scaled(left)
    return need_for_hours(run.pessimistic_hours, central_hours=run.hours, steps_left=left)


def need_for_hours(
    high_hours: float, *, central_hours: float | None = None, steps_left: float = 1.0
) -> CapacityNeed:
    """The need of a run whose range's high end is `high_hours` (the rule itself)."""
    needed = high_hours + STARTUP_HOURS
    return CapacityNeed(
        estimate=ESTIMATE,
        why=WHY,
        run_hours=round(high_hours, 3),
        central_hours=round(high_hours if central_hours is None else central_hours, 3),
        startup_hours=STARTUP_HOURS,
        reclaim_hours=RECLAIM_HOURS,
        needed_hours=round(needed, 3),
        plan_hours=max(1, math.ceil(round(needed + RECLAIM_HOURS, 6))),
        steps_left=steps_left,
    )
