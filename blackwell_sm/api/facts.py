"""A plan's facts that commands and notebooks state in words, each asked of its one home: the
job count (`RunEstimate.jobs`, set by planner/jobs.py) and the status sentence
(planner/summary.py `status_text`)."""

from __future__ import annotations

from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.summary import status_text

__all__ = ["job_count", "status_sentence"]


def job_count(p: Plan) -> int:
    """SageMaker jobs the run needs (28-day MaxRuntime each, at the range's slow end)."""
    return p.run.jobs


def status_sentence(p: Plan) -> str:
    """The plan's status in words (`bsm plan`'s headline): whether it fits, and in how many
    jobs."""
    return status_text(p)
