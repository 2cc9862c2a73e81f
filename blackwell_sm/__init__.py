"""blackwell_sm: plan, submit and run FSDP2 training on SageMaker ml.p6-b200.48xlarge.

Notebook API (imports are lazy; nothing heavy loads until used)::

    import blackwell_sm as bsm
    spec = bsm.load_spec("spec.yaml")  # `bsm init llama-3.1-8b > spec.yaml`
    plan = bsm.plan(spec)              # or bsm.plan("llama-3.1-8b", seq_len=8192, total_tokens=20e9)
    job = bsm.submit(spec)            # handle: status(), wait(), logs(), stop(), metrics()
    trainer = bsm.to_model_trainer(spec)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name loads on first use
    from blackwell_sm.api.facts import job_count as job_count
    from blackwell_sm.api.facts import status_sentence as status_sentence
    from blackwell_sm.api.plan import plan as plan
    from blackwell_sm.api.plan import trace_plan as trace_plan
    from blackwell_sm.api.plan import traced_plan as traced_plan
    from blackwell_sm.aws.handle import TrainingJob as TrainingJob
    from blackwell_sm.aws.sdk import to_model_trainer as to_model_trainer
    from blackwell_sm.aws.submit import submit as submit
    from blackwell_sm.errors import BsmError as BsmError
    from blackwell_sm.errors import InfeasiblePlanError as InfeasiblePlanError
    from blackwell_sm.errors import PlanWarning as PlanWarning
    from blackwell_sm.planner.plan import Plan as Plan
    from blackwell_sm.planner.preferences import PlanSet as PlanSet
    from blackwell_sm.planner.preferences import PreferencePlans as PreferencePlans
    from blackwell_sm.planner.preferences import as_plan_set as as_plan_set
    from blackwell_sm.planner.trace_check import TracedPlan as TracedPlan
    from blackwell_sm.spec import ModelSpec as ModelSpec
    from blackwell_sm.spec import RunSpec as RunSpec
    from blackwell_sm.spec import TrainingSpec as TrainingSpec
    from blackwell_sm.spec import load_spec as load_spec
    from blackwell_sm.spec import parse_spec as parse_spec

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "load_spec": "blackwell_sm.spec:load_spec",
    "parse_spec": "blackwell_sm.spec:parse_spec",
    "RunSpec": "blackwell_sm.spec:RunSpec",
    "ModelSpec": "blackwell_sm.spec:ModelSpec",
    "TrainingSpec": "blackwell_sm.spec:TrainingSpec",
    "Plan": "blackwell_sm.planner.plan:Plan",
    "plan": "blackwell_sm.api.plan:plan",
    "traced_plan": "blackwell_sm.api.plan:traced_plan",
    "trace_plan": "blackwell_sm.api.plan:trace_plan",
    "TracedPlan": "blackwell_sm.planner.trace_check:TracedPlan",
    "job_count": "blackwell_sm.api.facts:job_count",
    "status_sentence": "blackwell_sm.api.facts:status_sentence",
    "submit": "blackwell_sm.aws.submit:submit",
    "to_model_trainer": "blackwell_sm.aws.sdk:to_model_trainer",
    "to_estimator": "blackwell_sm.aws.sdk:to_estimator",
    "BsmError": "blackwell_sm.errors:BsmError",
    "InfeasiblePlanError": "blackwell_sm.errors:InfeasiblePlanError",
    "PlanWarning": "blackwell_sm.errors:PlanWarning",
    "PreferencePlans": "blackwell_sm.planner.preferences:PreferencePlans",
    "PlanSet": "blackwell_sm.planner.preferences:PlanSet",
    "as_plan_set": "blackwell_sm.planner.preferences:as_plan_set",
    "TrainingJob": "blackwell_sm.aws.handle:TrainingJob",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name].split(":")
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    from blackwell_sm.spec.suggest import did_you_mean

    hint = did_you_mean(name, _LAZY) if not name.startswith("_") else None
    raise AttributeError(
        f"module 'blackwell_sm' has no attribute {name!r}" + (f"; {hint}" if hint else "")
    )


def __dir__() -> list[str]:
    """The API's names (lazy, not yet loaded) beside the module's own: what completion lists."""
    own = {n for n in globals() if n.startswith("__") and n.endswith("__")}
    return sorted(own | set(_LAZY))
