"""Plans for the job-request tests: built directly from a spec, so these tests do not depend on
the planner's search (the builder reads only the plan's instance, config and run estimate)."""

from __future__ import annotations

from blackwell_sm.hardware import get_instance
from blackwell_sm.planner.plan import (
    InstanceRef,
    MemoryBreakdown,
    ModelRef,
    Plan,
    PlanConfig,
    PlanSpec,
    RunEstimate,
    Throughput,
)
from blackwell_sm.spec import RunSpec, parse_spec

JOB = {
    "role_arn": "arn:aws:iam::123456789012:role/bsm-test-role",
    "region": "us-east-1",
    "s3_prefix": "s3://bsm-test-bucket/runs",
    "channels": {"train": {"s3_uri": "s3://bsm-test-bucket/data/train/"}},
}


def run_spec(**job_overrides) -> RunSpec:
    return parse_spec(
        {
            "model": "llama-3.1-8b",
            "training": {"seq_len": 8192, "total_tokens": 10_000_000_000},
            "compute": {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 2},
            "job": {**JOB, **job_overrides},
        }
    )


def plan_for(spec: RunSpec, *, hours: float = 20.0, feasible: bool = True) -> Plan:
    inst = get_instance(spec.compute.instance_type)
    count = spec.compute.instance_count if isinstance(spec.compute.instance_count, int) else 1
    gpus = inst.gpus_per_instance * count
    return Plan(
        feasible=feasible,
        model=ModelRef(name=spec.model.name, n_params=spec.model.n_params),
        instance=InstanceRef(
            type=inst.name,
            count=count,
            gpus_per_instance=inst.gpus_per_instance,
            gpu=inst.gpu.name,
            gpu_memory_gib=inst.gpu.memory_gib,
        ),
        config=PlanConfig(
            shard_degree=gpus,
            replicate_degree=1,
            micro_batch_size=1,
            grad_accum_steps=max(1, spec.training.global_batch_sequences // gpus),
            seq_len=spec.training.seq_len,
            precision="bf16",
            activation_checkpointing="selective",
            compile=True,
            reshard_after_forward=True,
        ),
        memory_gib=MemoryBreakdown(
            params_fp32=1,
            grads_fp32=1,
            optimizer_states=2,
            params_unsharded=1,
            grads_unsharded=1,
            activations=10,
            logits_and_loss=1,
            overhead=5,
            total=22,
            limit=inst.gpu.memory_gib,
        ),
        throughput=Throughput(
            step_time_s=1.0,
            tokens_per_s_per_gpu=10000.0,
            mfu=0.4,
            flops_per_token=float(spec.model.flops_per_token(spec.training.seq_len)),
        ),
        run=RunEstimate(steps=100, tokens=100 * 4 * 2**20, hours=hours, cost_usd=None),
        spec=PlanSpec(model=spec.model, training=spec.training),
    )
