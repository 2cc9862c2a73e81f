"""train/check.py without processes: interval arithmetic of the step split, the ETA, the deadline
overrun and the memory-over-range decisions, and the lines SageMaker's regexes read back."""

from __future__ import annotations

import pytest
import torch
from train_support import local_plan

from blackwell_sm.metrics import CHECK_FIELDS, METRIC_REGEXES, parse_line
from blackwell_sm.records import CheckRecord, record_from_line, record_line
from blackwell_sm.train import check as C


def test_union_length_and_uncovered():
    assert C.union([(3, 4), (0, 1), (0.5, 2), (2, 2.5), (5, 5)]) == [(0, 2.5), (3, 4)]
    assert C.length([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    # comm 0..4, compute covers 1..2 and 3..5: exposed = 0..1 and 2..3
    assert C.uncovered([(0, 4)], [(1, 2), (3, 5)]) == pytest.approx(2.0)
    assert C.uncovered([(0, 1)], [(0, 1)]) == 0.0
    assert C.uncovered([(0, 1), (0.5, 1.5)], []) == pytest.approx(1.5)


def test_split_clips_to_the_step_and_counts_only_uncovered_comm():
    sp = C.split_intervals((10.0, 20.0), compute=[(9, 12), (14, 18)], comm=[(11, 15), (19, 25)])
    assert sp.span_s == 10.0
    assert sp.compute_s == pytest.approx(2 + 4)  # 10..12 and 14..18
    assert sp.comm_s == pytest.approx(4 + 1)  # 11..15 and 19..20
    assert sp.exposed_comm_s == pytest.approx(2 + 1)  # 12..14 and 19..20


def test_eta_and_overrun():
    assert C.eta_s(100, 0.5) == 50.0
    assert C.eta_s(-3, 0.5) == 0.0
    assert C.overrun_s(now=1000.0, eta=500.0, deadline=1400.0) == 100.0
    assert C.overrun_s(now=1000.0, eta=300.0, deadline=1400.0) == -100.0


class Sink:
    """The check's records, and the log lines the loop prints for them (records.record_line)."""

    def __init__(self) -> None:
        self.records: list = []
        self.lines: list[str] = []

    def __call__(self, rec) -> None:
        self.records.append(rec)
        self.lines.append(record_line(rec))


def _check(
    plan, *, deadline=None, now=1_000_000.0, start=0, runtime_gib=None
) -> tuple[C.RunCheck, Sink]:
    sink = Sink()
    chk = C.RunCheck(
        plan,
        torch.device("cpu"),
        start_step=start,
        deadline=deadline,
        tokens_per_step=plan.config.global_batch_sequences * plan.config.seq_len,
        n_gpus=plan.instance.count * plan.instance.gpus_per_instance,
        emit=sink,
        memory=lambda: 0.1,
        runtime_gib=runtime_gib,
        clock=lambda: now,
    )
    return chk, sink


def test_compare_puts_measured_beside_the_plan():
    plan = local_plan(steps=100)
    chk, _ = _check(plan)
    chk.split = C.StepSplit(span_s=2.0, compute_s=1.5, comm_s=0.8, exposed_comm_s=0.3)
    th = plan.throughput
    pred_step = th.step_time_s
    got = chk.compare(step_time=pred_step * 2, mem_gib=0.1, step_done=10)
    tok = chk.tokens_per_step / (pred_step * 2) / chk.n_gpus
    assert got["tok_s_gpu"] == pytest.approx(tok)
    assert got["speed_ratio"] == pytest.approx(tok / th.tokens_per_s_per_gpu)
    assert got["speed_ratio"] == pytest.approx(0.5, rel=0.05)  # the plan's figures are rounded
    assert got["speed"] == "below_range"  # the CPU range is +-35%
    assert got["compute_s"] == pytest.approx(pred_step * 2 * 0.75)
    assert got["exposed_comm_s"] == pytest.approx(pred_step * 2 * 0.15)
    assert got["other_s"] == pytest.approx(pred_step * 2 * 0.10)
    assert got["eta_s"] == pytest.approx(90 * pred_step * 2)
    assert got["mfu"] == pytest.approx(th.mfu / 2, rel=0.05)
    assert got["memory"] == "in_range" and got["timing"] == "cpu_profiler"
    assert got["pred_mem_high_gib"] == pytest.approx(plan.memory_gib.total * 1.1)
    ok = chk.compare(step_time=pred_step, mem_gib=0.1, step_done=10)
    assert ok["speed"] == "in_range"
    chk.split = None
    wall = chk.compare(step_time=1.0, mem_gib=0.1, step_done=10)
    assert wall["timing"] == "wall_clock" and wall["compute_s"] == 1.0


def test_check_line_carries_every_metric_and_parses_back():
    from blackwell_sm.metrics import format_check_line

    plan = local_plan(steps=100)
    chk, _ = _check(plan)
    got = chk.compare(step_time=0.25, mem_gib=0.2, step_done=5)
    line = format_check_line(5, got)
    parsed = parse_line(line)
    for key, name in CHECK_FIELDS.items():
        assert parsed[name] == pytest.approx(got[key], rel=1e-5), key
    back = record_from_line(line)  # what `bsm status` reads: the typed record, every field
    assert isinstance(back, CheckRecord) and back.step == 5
    for key, value in back.model_dump(exclude={"kind", "step", "slowest_rank_step_time_s"}).items():
        assert value == (got[key] if isinstance(value, str) else pytest.approx(got[key], rel=1e-5))
    assert "speed=" in line and "memory=in_range" in line
    assert not any(k.startswith("train:") for k in parsed)  # the step regexes ignore it


def test_overrun_alert_names_what_to_do_once_and_is_a_metric():
    plan = local_plan(steps=1000)
    now = 1_000_000.0
    chk, sink = _check(plan, deadline=(now + 600.0, "job max runtime"), now=now)
    chk.observe(20, mem_gib=0.1, eta=500.0)  # ends 100 s before the deadline
    assert sink.lines == [] and chk.last_eta.ends_before_deadline is True
    assert chk.last_eta.overrun_s == pytest.approx(-100.0)
    chk.observe(30, mem_gib=0.1, eta=4200.0)  # 1 h past it
    chk.observe(40, mem_gib=0.1, eta=4300.0)  # still past: no second line
    assert len(sink.lines) == 1
    line = sink.lines[0]
    assert line.startswith("[bsm-alert] step=30 kind=overrun")
    assert "bsm plans extend" in line and "instance_count" in line and "--until-done" in line
    assert "job max runtime" in line
    assert parse_line(line) == {"alert:overrun_s": pytest.approx(3600.0)}
    _, eta, alerts = chk.summary()
    assert eta.overrun_s == pytest.approx(3700.0)  # the latest
    assert alerts[0].alert == "overrun" and alerts[0].time == now


def test_no_deadline_no_overrun_but_the_eta_is_kept():
    chk, sink = _check(local_plan(steps=100))
    chk.observe(5, mem_gib=0.1, eta=1e9)
    assert sink.lines == [] and chk.last_eta.eta_s == 1e9
    assert chk.last_eta.deadline is None and chk.last_eta.overrun_s is None


def test_memory_above_the_plans_range_is_an_alert():
    plan = local_plan(steps=100)
    high = C.memory_high_gib(plan)
    chk, sink = _check(plan)
    chk.observe(5, mem_gib=high * 0.99, eta=None)
    assert sink.lines == []
    chk.observe(6, mem_gib=high + 0.5, eta=None)
    assert len(sink.lines) == 1 and "kind=memory" in sink.lines[0]
    assert "micro_batch_size" in sink.lines[0]
    assert parse_line(sink.lines[0]) == {"alert:memory_over_plan_gib": pytest.approx(0.5)}


def test_cuda_plan_compares_against_the_allocator_reserved_figure():
    plan = local_plan(steps=10)
    mem = plan.memory_gib.model_copy(update={"allocator_reserved": 3.0, "total": 4.0})
    inst = plan.instance.model_copy(update={"device": "cuda"})
    cuda = plan.model_copy(update={"memory_gib": mem, "instance": inst})
    assert cuda.predicted_memory_gib() == 3.0
    assert C.memory_high_gib(cuda) == pytest.approx(3.3)
    assert plan.predicted_memory_gib() == plan.memory_gib.total


def test_a_cpu_run_compares_with_its_own_measured_runtime():
    """CPU RSS holds the interpreter, torch and gloo, whose size varies by machine: the run's
    measured runtime replaces the planner's assumed one, in the range and in the alert."""
    plan = local_plan(steps=100)
    m = plan.memory_gib
    assumed = m.total - m.allocator_reserved
    assert assumed > 0
    big = assumed + 0.3  # a machine whose runtime is 0.3 GiB larger than assumed
    assert plan.predicted_memory_gib(big) == pytest.approx(m.total + 0.3)
    chk, sink = _check(plan, runtime_gib=big)
    chk.observe(5, mem_gib=C.memory_high_gib(plan) + 0.2, eta=None)  # above the assumed range
    assert sink.lines == []  # but within the range of what this process is
    chk.observe(6, mem_gib=C.memory_high_gib(plan, big) + 0.1, eta=None)
    assert len(sink.lines) == 1 and f"predicted {m.total + 0.3:.2f} GiB" in sink.lines[0]


def test_the_window_waits_for_warm_up_and_a_resume_moves_it():
    chk, _ = _check(local_plan(steps=100), start=40)
    assert (chk.first, chk.last) == (40 + C.WARMUP_STEPS, 40 + C.WARMUP_STEPS + C.PROFILE_STEPS - 1)
    assert chk.after(chk.last + 1) == 0.0 and chk.result is None  # nothing timed: no collective
    assert chk.eta(50) is None


def test_every_regex_is_a_metric_definition_within_the_limit():
    assert len(METRIC_REGEXES) <= 40  # MetricDefinitionList.max
    assert "train:eta_s" in METRIC_REGEXES and "alert:overrun_s" in METRIC_REGEXES


def test_cpu_profile_of_a_real_step_splits_into_compute_and_gloo_communication(tmp_path):
    """A real torch.profiler trace in this process: matmuls and a gloo all-reduce of a process
    group of one under the step mark; the split sees both and stays inside the step."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        a = torch.randn(256, 256)
        with profile(activities=[ProfilerActivity.CPU]) as prof, record_function(C.STEP_MARK):
            for _ in range(4):
                a = (a @ a).tanh()
            dist.all_reduce(a)
        sp = C.split_from_profile(prof.events(), "cpu")
    finally:
        dist.destroy_process_group()
    assert sp is not None and sp.span_s > 0
    assert 0 < sp.compute_s <= sp.span_s
    assert 0 < sp.comm_s <= sp.span_s and 0 <= sp.exposed_comm_s <= sp.comm_s


class _Range:
    def __init__(self, start_us: float, end_us: float) -> None:
        self.start, self.end = start_us, end_us


class _Event:
    """The attributes split_from_profile reads from a torch.profiler FunctionEvent."""

    def __init__(
        self,
        name: str,
        device: str,
        start_us: float,
        end_us: float,
        thread: int = 1,
        annotation: bool = False,
    ):
        from torch.autograd import DeviceType

        self.name, self.thread, self.is_user_annotation = name, thread, annotation
        self.device_type = DeviceType.CUDA if device == "cuda" else DeviceType.CPU
        self.time_range = _Range(start_us, end_us)


def test_cuda_split_classifies_nccl_kernels_and_spans_the_kernels():
    """No GPU here: CUDA kernels as FunctionEvents carry them (device_type CUDA, name)."""
    events = [
        _Event(C.STEP_MARK, "cpu", 0, 100),  # the host returns early: kernels run later
        _Event("aten::mm", "cpu", 10, 20),  # host ops are not device time
        _Event(C.STEP_MARK, "cuda", 40, 190, annotation=True),  # ranges on the GPU timeline
        _Event("FSDP::all_gather", "cuda", 40, 60, annotation=True),
        _Event("sm90_xmma_gemm_bf16", "cuda", 50, 150),
        _Event("ncclDevKernel_AllGather_RING_LL", "cuda", 40, 60),  # 40..50 exposed
        _Event("ncclDevKernel_ReduceScatter_RING_LL", "cuda", 140, 180),  # 150..180 exposed
        _Event("vectorized_elementwise_kernel", "cuda", 180, 190),
    ]
    sp = C.split_from_profile(events, "cuda")
    assert sp.span_s == pytest.approx(150e-6)  # 40..190
    assert sp.compute_s == pytest.approx(110e-6)
    assert sp.comm_s == pytest.approx(60e-6)
    assert sp.exposed_comm_s == pytest.approx(40e-6)
    assert C.split_from_profile(events[1:], "cuda") is None  # no step mark: no split


def test_cpu_peak_memory_is_the_workers_own_not_its_parents():
    """ru_maxrss carries the parent's pages at fork and the peak before exec: a worker started by
    a large process (pytest, the CLI, torchrun) would report the parent's size and trip the
    memory alert. peak_memory reads this image's own high-water mark."""
    import subprocess
    import sys

    code = (
        "import resource, torch; from blackwell_sm.train.metrics_log import peak_memory; "
        "print(peak_memory(torch.device('cpu'))[1], "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)"
    )
    ballast = bytearray(1024**3)  # a 1 GiB parent
    ballast[::4096] = b"\x01" * len(range(0, len(ballast), 4096))  # touched: resident
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    own, inherited = (float(x) for x in out.stdout.split())
    del ballast
    assert inherited > 1.0  # what getrusage says: the parent's gigabyte
    assert own < 0.8  # python + torch alone
