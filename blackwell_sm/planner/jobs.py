"""How many SageMaker jobs a run needs, and the one warning that says so: the job count's one
home (the plan's `run.jobs`, its headline and its warnings all read it from here)."""

from __future__ import annotations

import math

from blackwell_sm.planner.notes import Note, warning
from blackwell_sm.planner.units import hours_text
from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

#: What submits the jobs of a run longer than one, in turn (docs/aws.md).
UNTIL_DONE = "bsm submit SPEC --until-done"


def job_count(pessimistic_hours: float) -> int:
    """SageMaker jobs of at most 28 days (MaxRuntime) for a run of `pessimistic_hours`."""
    return max(1, math.ceil(pessimistic_hours / MAX_RUNTIME_HOURS))


def job_notes(hours: float, hours_range: tuple[float, float], local: bool) -> list[Note]:
    """The warning for a run that needs more than one job: its count, from the range's slow end
    (`job_count`), and what submits them."""
    jobs = job_count(hours_range[1])
    if jobs == 1 or local:
        return []
    slow = f"{hours_range[1]:,.0f} h at the range's slow end"
    if hours > MAX_RUNTIME_HOURS:
        return [
            warning(
                "over_max_runtime",
                f"predicted {hours_text(hours)} is longer than one 28-day SageMaker job: the run "
                f"needs {jobs} jobs ({slow}), each resuming from the checkpoints: {UNTIL_DONE}",
            )
        ]
    return [
        warning(
            "jobs_at_slow_end",
            f"at the pessimistic end of the range ({slow}) the run needs {jobs} SageMaker jobs "
            f"of at most 28 days, each resuming from the checkpoints: {UNTIL_DONE}",
        )
    ]
