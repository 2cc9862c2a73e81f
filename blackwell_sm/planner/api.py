"""The planner's entry points, `make_plan(spec)` and `pinned_plan` (the pipeline,
`planner/pipeline.py`), re-exported for callers that import them from here. Pure: the notebook
front door, `plan()` and traces, lives above the planner in `blackwell_sm/api/plan.py`.
"""

from __future__ import annotations

from blackwell_sm.planner.pipeline import make_plan, pinned_plan

__all__ = ["make_plan", "pinned_plan"]
