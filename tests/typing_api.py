"""Checked by mypy in `make test` ([tool.mypy] files), never run: the notebook API's types as a
user's code sees them through `import blackwell_sm as bsm`."""

from __future__ import annotations

from typing import assert_type

import blackwell_sm as bsm
from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.aws.jobs import JobInfo
from blackwell_sm.aws.progress import Progress
from blackwell_sm.job.sdk import ModelTrainer
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PlanSet, PreferencePlans
from blackwell_sm.planner.trace_check import TracedPlan


def notebook(spec: bsm.RunSpec) -> None:
    p = bsm.plan("llama-3.1-70b", seq_len=4096)
    assert_type(p, Plan | PreferencePlans)
    assert_type(bsm.plan("llama-3.2-1b", trace=True), TracedPlan)  # needs torch
    assert_type(bsm.traced_plan("llama-3.2-1b", seq_len=2048), TracedPlan)
    q = bsm.plan("llama-3.1-8b", seq_len=32768, total_tokens=20_000_000_000, instance_count="auto")
    assert_type(q, Plan | PreferencePlans)
    if isinstance(q, bsm.Plan):
        assert_type(bsm.job_count(q), int)
        assert_type(bsm.status_sentence(q), str)
    plans = bsm.as_plan_set(p)  # one shape: a plan per preference, or the one plan
    assert_type(plans, PlanSet)
    assert_type(plans.primary, Plan)
    assert_type(plans.preferences, PreferencePlans | None)
    if isinstance(p, bsm.Plan):
        assert_type(p.summary(), str)
        assert_type(p._repr_html_(), str)
        assert_type(p.run.cost_usd_range, tuple[float, float] | None)
    assert_type(bsm.load_spec("spec.yaml"), bsm.RunSpec)
    job = bsm.submit(spec, dry_run=True)
    assert_type(job, TrainingJob)
    assert_type(job.status(), JobInfo)
    assert_type(job.progress(), Progress)
    assert_type(bsm.to_model_trainer(spec), ModelTrainer)
    try:
        bsm.plan(spec, allow_infeasible=False)
    except bsm.InfeasiblePlanError as e:
        assert_type(e.exit_code, int)
    w: type[Warning] = bsm.PlanWarning
    del w
