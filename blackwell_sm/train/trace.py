"""The real loop at full size without a GPU: fake tensors, a fake process group, PyTorch's tracker.

`trace_plan(plan)` builds the plan's model exactly as the trainer does (`train/parallelize.py`:
loss, context parallelism, activation checkpointing, FSDP2; eager and bf16, see below) on fake
tensors (`FakeTensorMode`: shapes, dtypes and devices, no storage) in a fake process group of the
plan's world size (rank 0's view), and runs the loop's step on the CPU device: forward with the
loss, backward, the gradient norm, the optimizer step, `zero_grad`. PyTorch's FSDP2 memory tracker
(`FSDPMemTracker`) counts every live tensor by what it is (sharded / unsharded parameters and
gradients, activations, temporaries, collective buffers) through a warm-up step and the measured
forward-backward.

The gradient norm and the optimizer step run outside the tracked region: on fake tensors the
tracker books DTensor temporaries there that real tensors never hold (the norm: every gradient
at its unsharded size; the step: 7-17x the shards as "optimizer state"; docs/planner.md "Tracing
the real loop"). The step's moment is what backward left plus the optimizer's state, read from
`optimizer.state` itself (two fp32 tensors and a step per parameter shard), which is also alive
at every moment after the first step. Not traced: compile (inductor on fake CPU tensors is not the
GPU's compile) and fp8 / mxfp8 (torchao's linears need a GPU): the trace runs eager bf16 and says
so. Nothing here touches a GPU or the network.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager, nullcontext
from typing import NamedTuple

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.planner.plan import Plan

#: The tracker's categories → the Plan's memory terms (`MemoryBreakdown`).
TERM_OF = {
    "Sharded Param": "params_fp32",
    "Sharded Grad": "grads_fp32",
    "Optstate": "optimizer_states",
    "Unsharded Param": "params_unsharded",
    "All Gather": "params_unsharded",
    "Unsharded Grad": "grads_unsharded",
    "Reduce Scatter": "grads_unsharded",
    "Activation": "activations_and_loss",
    "Temp": "activations_and_loss",
    "Inputs": "activations_and_loss",
    "Buffer": "buffers",
}
#: The terms FSDP2's CPUOffloadPolicy keeps in host memory.
HOST_TERMS = ("params_fp32", "grads_fp32", "optimizer_states")
TERMS = (
    "params_fp32",
    "grads_fp32",
    "optimizer_states",
    "params_unsharded",
    "grads_unsharded",
    "activations_and_loss",
    "buffers",
)


class TraceResult(BaseModel):
    """One traced step of the plan's loop on rank 0 of its world, bytes per rank."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="The plan's model name.")
    world_size: int = Field(description="Ranks of the fake process group (the plan's).")
    micro_batch_size: int
    seq_len: int
    activation_checkpointing: str
    precision: str
    cp_degree: int
    loss_impl: str
    device: str = Field(description="The device the fake tensors claim: cpu (no GPU is touched).")
    form: str = Field("cpu", description="gpu: the GPU's kernels (train/gpu_form.py); cpu.")
    peak_bytes: int = Field(description="Traced peak per rank: the larger of the two phases.")
    peak_at: str = Field(description="Where the peak was: phase and innermost module.")
    terms: dict[str, int] = Field(description="Bytes by Plan term at the peak (sum = peak).")
    fwd_bwd_peak_bytes: int = Field(description="Peak of forward, loss and backward, with state.")
    step_peak_bytes: int = Field(description="At the optimizer step: what backward left, state.")
    optimizer_state_bytes: int = Field(description="Bytes of optimizer.state after a step.")
    sharded_params: int = Field(description="Parameter elements this rank holds after FSDP2.")
    total_params: int = Field(description="Global parameter elements of the wrapped model.")
    fsdp_units: int = Field(description="Modules fully_shard wrapped (blocks + root).")
    checkpointed_blocks: int = Field(description="Blocks whose ac_mode is not none.")
    micro_batches: int = Field(description="Micro-batches traced per step (<= 2 stand for all).")
    host_bytes: int = Field(0, description="Offloaded state in host memory (not in the peak).")
    fake: bool = Field(True, description="Fake tensors (False: real ones, the instrument check).")
    tracker_rise_bytes: int | None = Field(
        None, description="The tracker's forward-backward peak above what was live before it."
    )
    allocator_rise_bytes: int | None = Field(
        None, description="The CPU allocator's rise over the same code (real tensors only)."
    )
    wall_s: float = Field(description="Seconds the trace took.")


@contextmanager
def fake_world(world_size: int):
    """A fake process group of `world_size` ranks (this process is rank 0), torn down after."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised; trace in a fresh process")
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def _env(world_size: int, device: torch.device):
    from blackwell_sm.train.distributed import Env

    return Env(rank=0, world_size=world_size, local_rank=0, device=device)


def _batch(plan: Plan, device: torch.device, seq_len: int) -> tuple:
    """One micro-batch as the loop's `_rows` gives it: tokens (b, seq + 1), and for packed
    fine-tuning rows a loss mask and document ids."""
    shape = (plan.config.micro_batch_size, seq_len + 1)
    spec = plan.spec
    tokens = torch.randint(0, spec.model.vocab_size, shape, device=device)
    if not _packed(plan):
        return (tokens, None, None)
    mask = torch.ones(shape, dtype=torch.uint8, device=device)
    return (tokens, mask, torch.zeros(shape, dtype=torch.int32, device=device))


def _packed(plan: Plan) -> bool:
    """Fine-tuning rows are packed samples (the planner's rule, planner/frame.py)."""
    return plan.spec.training.task == "finetune"


def _by_term(snap: dict[str, int]) -> dict[str, int]:
    out = dict.fromkeys(TERMS, 0)
    for key, v in snap.items():
        name = key.split(".")[-1] if "." in key else key
        term = TERM_OF.get(_label(name))
        if term:
            out[term] += v
    return out


def _label(name: str) -> str:
    """The tracker's category label from an enum's str() or its value."""
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType

    for ref in _FSDPRefType:
        if name in (ref.name, ref.value):
            return ref.value
    return name


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (its numel() is the global one), or `t`."""
    return t.to_local() if hasattr(t, "to_local") else t


def _state_bytes(optimizer) -> int:
    """Bytes of the optimizer's state on this rank (exp_avg, exp_avg_sq, step per shard)."""
    return sum(
        _local(t).numel() * t.element_size()
        for st in optimizer.state.values()
        for t in st.values()
        if isinstance(t, torch.Tensor)
    )


def trace_plan(
    plan: Plan,
    *,
    fake: bool = True,
    warmup: bool = True,
    device: str = "cpu",
    form: str = "gpu",
) -> TraceResult:
    """Trace the plan's step on fake tensors (see the module docstring); bytes per rank.
    `fake=False`: real (uninitialised) tensors, with the CPU allocator's own rise over the
    measured forward-backward beside the tracker's: the instrument's check, at small sizes.
    `warmup=False`: no warm-up step (half the time; tests/test_trace.py shows it changes no
    figure). `device="cuda"` (on a GPU machine, fake tensors still): the plan's own device form
    (fused norms, block masks, the CUDA loss policy), which is what the GPU check holds its
    measured peak to. `form="gpu"` (the default): the GPU's kernels on whatever device
    (`train/gpu_form.py`), what the plan's printed figure is for; `form="cpu"`: the model as
    run-local runs it."""
    if form not in ("gpu", "cpu"):
        raise ValueError(f"form must be gpu or cpu, not {form!r}")
    from blackwell_sm.train.context_parallel import CpGroup
    from blackwell_sm.train.distributed import build_cp_mesh, build_mesh

    # Eager and bf16: inductor on fake CPU tensors is not the GPU's compile, and torchao's fp8
    # linears need a GPU (docs/planner.md "Tracing the real loop"); TraceResult says what ran.
    cfg = plan.config.model_copy(update={"compile": False, "precision": "bf16"})
    plan = plan.model_copy(update={"config": cfg})
    dev = torch.device(device)
    t0 = time.perf_counter()
    gc.collect()
    with fake_world(cfg.world_size):
        env = _env(cfg.world_size, dev)
        # The meshes before fake mode: their rank bookkeeping reads real tensors.
        mesh = build_mesh(cfg, env)
        cp_mesh = build_cp_mesh(cfg, env)
        cp = None if cp_mesh is None else CpGroup.from_mesh(cp_mesh)
        return _trace(plan, mesh, cp, dev, t0, fake, warmup, form)


def _tracker_class():
    """FSDPMemTracker that also notes where its peak was (module, forward or backward)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    class Tracker(FSDPMemTracker):
        peak_at = ""

        def _update_peak_stats(self, peak_state) -> None:
            before = dict(self._peak_mem)
            super()._update_peak_stats(peak_state)
            if self._peak_mem != before:
                inner = max(self._mod_tracker.parents, key=lambda m: (m.count("."), m))
                phase = "backward" if self._mod_tracker.is_bw else "forward"
                self.peak_at = f"{phase} of {inner.removeprefix('FSDP')}"

    return Tracker


class _Phase(NamedTuple):
    terms: dict[str, int]  # bytes by term at the phase's peak
    at: str  # where the peak was
    rise: int  # the tracker's peak minus what was live when the phase began
    allocator_rise: int | None  # the same from the CPU allocator (real tensors only)
    after: dict[str, int]  # bytes by term still live when the phase ended


def _phase(tracker, device: torch.device, fn, *, allocator: bool = False) -> _Phase:
    """Run `fn` under the tracker (whose peak starts at what is live now); with `allocator`,
    also under the profiler, for the CPU allocator's own rise over the same code."""
    gc.collect()  # frees left in reference cycles would otherwise count until the next sweep
    tracker.peak_at = ""
    with tracker:
        tracker.reset_mod_stats()
        start = tracker.get_tracker_snapshot("current").get(device, {})
        if allocator:
            alloc = allocator_rise(fn)[0]
        else:
            fn()
            alloc = None
    snap = tracker.get_tracker_snapshot("peak").get(device, {})
    rise = int(snap.get("Total", 0)) - int(start.get("Total", 0))
    terms = _by_term({str(k): int(v) for k, v in snap.items()})
    gc.collect()
    end = tracker.get_tracker_snapshot("current").get(device, {})
    after = _by_term({str(k): int(v) for k, v in end.items()})
    return _Phase(terms, _where(tracker.peak_at), rise, alloc, after)


def _where(peak_at: str) -> str:
    if peak_at == "backward of Global":
        return "loss's backward (before the root's backward hooks)"
    return peak_at or "start of the phase"


def allocator_rise(fn) -> tuple[int, int]:
    """(peak, end) bytes the CPU allocator held above its level when `fn` started, from the
    profiler's allocation events (each carries the allocator's running total)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()

    def walk(nodes):
        for n in nodes:
            yield n
            yield from walk(n.children)

    tree = prof.profiler.kineto_results.experimental_event_tree()
    allocs = sorted(
        (e for e in walk(tree) if e.tag == _EventType.Allocation), key=lambda e: e.start_time_ns
    )
    if not allocs:
        return 0, 0
    first = allocs[0].extra_fields
    base = first.total_allocated - first.alloc_size
    peak = max(e.extra_fields.total_allocated for e in allocs)
    return peak - base, allocs[-1].extra_fields.total_allocated - base


# long function: one step of the loop, as train/loop.py runs it, phase by phase
def _trace(
    plan: Plan,
    mesh,
    cp,
    device: torch.device,
    t0: float,
    fake: bool,
    warmup: bool,
    form: str = "gpu",
) -> TraceResult:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from blackwell_sm.train.gpu_form import use_gpu_form
    from blackwell_sm.train.loss import loss_sum
    from blackwell_sm.train.model import Transformer
    from blackwell_sm.train.optim import build_optimizer, clip_grad_norm
    from blackwell_sm.train.parallelize import apply_plan, materialize

    cfg, tr = plan.config, plan.spec.training
    with FakeTensorMode() if fake else nullcontext():
        with torch.device("meta"):
            model = Transformer(plan.spec.model, max_seq_len=cfg.seq_len)
        if form == "gpu":
            use_gpu_form(model)
        model = apply_plan(model, plan, mesh, cp)
        materialize(model, device, tr.seed, init=False)
        optimizer = build_optimizer(model, tr.optimizer, device)
        n_micro = min(cfg.grad_accum_steps, 2)  # the second stands for every later one
        batches = [_batch(plan, device, cfg.seq_len) for _ in range(n_micro)]
        tracker = _tracker_class()(model)
        tracker.track_inputs(tuple(batches))

        def fwd_bwd(rows: list[tuple]) -> None:
            for batch in rows:
                loss_sum(model, *batch).backward()

        def step() -> None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        # Warm-up (FSDP's lazy init, the optimizer's state) on short rows: nothing it leaves
        # depends on the sequence length.
        if warmup:
            _phase(tracker, device, lambda: fwd_bwd([_batch(plan, device, _warmup_len(cfg))]))
            step()
        # Accumulating: the last micro-batch, with the earlier ones' sharded gradients alive (the
        # tracker follows one forward-backward at a time).
        fwd_bwd(batches[:-1])
        fwd = _phase(tracker, device, lambda: fwd_bwd(batches[-1:]), allocator=not fake)
        # The gradient norm and the step outside the tracker: on fake tensors it books DTensor
        # temporaries there (the norm: the unsharded size of every gradient; the step: 7-17x
        # the shards) that real tensors never hold (docs/planner.md "Tracing the real loop").
        clip_grad_norm(model, tr.optimizer.grad_clip)
        step()
        opt_bytes = _state_bytes(optimizer)  # alive from the first step on
        sharded = sum(_local(p).numel() for p in model.parameters())
        total = sum(p.numel() for p in model.parameters())
        units = sum(1 for m in model.modules() if type(m).__name__.startswith("FSDP"))
        ckpt = sum(1 for b in model.layers if b.ac_mode != "none")
    fwd_terms, step_terms = fwd.terms, fwd.after  # the step: what backward left
    fwd_terms["optimizer_states"] = step_terms["optimizer_states"] = opt_bytes
    # Offloaded (CPUOffloadPolicy): in the GPU form the sharded state is the host's, not the
    # GPU's; in the CPU form (run-local's) the host is the device and it stays in the peak.
    host = 0
    if getattr(cfg, "offload", False) and form == "gpu":
        host = max(sum(t[k] for k in HOST_TERMS) for t in (fwd_terms, step_terms))
        for t in (fwd_terms, step_terms):
            t.update(dict.fromkeys(HOST_TERMS, 0))
    fwd_peak, step_peak = sum(fwd_terms.values()), sum(step_terms.values())
    at_fwd = fwd_peak >= step_peak
    return TraceResult(
        model=plan.model.name,
        world_size=cfg.world_size,
        micro_batch_size=cfg.micro_batch_size,
        seq_len=cfg.seq_len,
        activation_checkpointing=cfg.activation_checkpointing,
        precision=cfg.precision,
        cp_degree=cfg.cp_degree,
        loss_impl=tr.loss_impl,
        device=device.type,
        form=form,
        peak_bytes=max(fwd_peak, step_peak),
        peak_at=fwd.at if at_fwd else "optimizer step (the gradients, the state)",
        terms=fwd_terms if at_fwd else step_terms,
        fwd_bwd_peak_bytes=fwd_peak,
        step_peak_bytes=step_peak,
        optimizer_state_bytes=opt_bytes,
        sharded_params=sharded,
        total_params=total,
        fsdp_units=units,
        checkpointed_blocks=ckpt,
        micro_batches=n_micro,
        host_bytes=host,
        fake=fake,
        tracker_rise_bytes=fwd.rise,
        allocator_rise_bytes=fwd.allocator_rise,
        wall_s=round(time.perf_counter() - t0, 2),
    )


def _warmup_len(cfg) -> int:
    """A short sequence the plan's context parallelism can cut (2 x cp equal chunks)."""
    return min(cfg.seq_len, 2 * cfg.cp_degree * 64)


def traced_peak_bytes(
    plan: Plan, *, warmup: bool = True, device: str = "cpu", form: str = "gpu"
) -> int:
    """Per-rank traced peak (bytes) of `plan`'s training step (`trace_plan`)."""
    return trace_plan(plan, warmup=warmup, device=device, form=form).peak_bytes
