"""Every calibration constant of the planner, in one place, each with where it comes from.

Sources are either a row of `shared/reference/measurements.csv` (by its `id`), a derivation from
the code the plan runs (`blackwell_sm/train/...`), or a published figure. `benchmarks/
planner_accuracy.py` re-predicts every measured row with these values and prints the error.
Constants marked *fitted* were chosen so that the rows they name are predicted within the
accuracy targets; the others are derived or taken as published and were not tuned.
"""

from __future__ import annotations

from typing import NamedTuple

# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------

#: Bytes per parameter of the sharded training state: fp32 master weight (4), fp32 gradient (4),
#: AdamW exp_avg + exp_avg_sq (4 + 4). Derived: train/parallelize.py keeps fp32 sharded params
#: (MixedPrecisionPolicy param_dtype=bf16 only for compute), train/optim.py is torch AdamW.
MASTER_PARAM_BYTES = 4
GRAD_BYTES = 4
ADAM_STATE_BYTES = 8

#: Bytes per gathered parameter for compute: bf16 (2), or 1 for fp8 linears when torchao's float8
#: all-gather is on (train/precision.py sets enable_fsdp_float8_all_gather=True). mxfp8 gathers bf16.
GATHER_BYTES = {"bf16": 2, "fp8": 1, "mxfp8": 2}

#: Blocks whose gathered parameters are live at once: the running block plus the one FSDP2
#: prefetches (implicit forward prefetch and backward prefetch of one block). Derived from FSDP2.
LIVE_GATHERED_BLOCKS = 2

#: Unsharded-gradient bytes per block parameter during backward: the bf16 gradient (2), its fp32
#: copy for the fp32 reduce-scatter (4; MixedPrecisionPolicy reduce_dtype=float32), and the fp32
#: input of the previous block's reduce-scatter still in flight (4). Derived.
BLOCK_GRAD_BYTES = 2 + 4 + 4

#: Bytes per logit of the loss: the loop computes cross_entropy(logits.float()) — at the peak
#: (start of backward) the fp32 log-softmax output saved for backward (4), the fp32 gradient
#: flowing into it (4) and the fp32 gradient it produces (4). Derived from train/loop.py; the
#: bf16 logits themselves (2) are freed before backward.
LOSS_BYTES_PER_LOGIT = 12
#: ... and with the loss under torch.compile (torchtitan 2025 compiles it with the model): the fp32
#: upcast and log-softmax fuse, leaving the bf16 logits and their bf16 gradient (2 + 2). Derived;
#: it reconciles tt-h200x32-fp8-compile / tt-h200x64-fp8-compile (48 GiB) with the 2024-12 rows
#: (62 GiB) of the same model, batch and policy. Used only for rows of that stack.
LOSS_BYTES_PER_LOGIT_COMPILED = 4

#: CUDA context, cuBLAS/cuDNN workspaces: memory nvidia-smi shows that the torch caching allocator
#: does not. Published rule of thumb (~0.5-1 GiB on Hopper/Blackwell); not fitted.
CUDA_CONTEXT_GIB = 0.8
#: NCCL communicator buffers outside the caching allocator, per process group in use (FSDP
#: shard group, HSDP replica group). NCCL default NCCL_BUFFSIZE 4 MiB x channels x peers; ~0.5 GiB
#: per communicator on 8-GPU NVLink nodes. Not fitted.
NCCL_GIB_PER_GROUP = 0.5
#: Python + torch runtime per CPU worker process (local runs): measured RSS of an idle worker.
CPU_RUNTIME_GIB = 0.4

#: Caching-allocator fragmentation as a fraction of the dynamic (activation, logits, transient)
#: memory (max_reserved / max_allocated). *Fitted* to the max_reserved of the six torchtitan
#: H100/H200 FSDP rows under the traced memory model (the peak of the step's phases, 2026-12-05):
#: 0.12 puts five within 5% (median 3.0%) and the 32k row 9.6% low; the B200 rows land +2..+4%.
#: It was 0.06 under the summed model, whose extra terms stood in for part of it.
FRAGMENTATION = 0.12

# torch.compile's memory saving is not credited (it was a fitted 0.88 on activations, from
# tt-h100x128-bf16-compile vs -eager): the printed figure is the eager GPU form that `--trace`
# checks, and no trace here can run inductor. The measured compiled rows sit 4-10 % below it
# (docs/planner.md, "Compile's memory").

#: A plan "fits" when its predicted total is within this fraction of the usable memory; the rest
#: covers allocator spikes the model does not see. Engineering margin, not fitted.
MEMORY_HEADROOM = 0.03

# ---------------------------------------------------------------------------------------------
# Step time
# ---------------------------------------------------------------------------------------------

#: Achieved fraction of dense peak for the block linears (GEMMs plus the memory-bound elementwise
#: work around them that ELEMENTWISE_BYTES does not model), by (precision, compile). *Fitted*: bf16 eager to
#: tt-h100x128-bf16-eager, bf16 compile to tt-h100x128-bf16-compile, fp8 compile to
#: tt-h100x128-fp8-compile and tt-h200x32-fp8-compile; fp8 eager and mxfp8 are not measured here
#: and are set by the compile speed-up seen in bf16 (eager) and as equal to fp8 (mxfp8, same
#: tensor-core rate on Blackwell; blockwise scales cost a little, so slightly lower).
MATMUL_EFFICIENCY: dict[tuple[str, bool], float] = {
    ("bf16", False): 0.58,
    ("bf16", True): 0.66,
    ("fp8", False): 0.42,  # = fp8 compile x (bf16 eager / bf16 compile); not measured
    ("fp8", True): 0.48,
    ("mxfp8", False): 0.40,  # not measured: fp8's, less ~5% for the blockwise scaling
    ("mxfp8", True): 0.46,
}

#: Flash/SDPA attention: achieved fraction of the bf16 peak on the causal work (half the full
#: score matrix that the MFU formula counts). The FlashAttention-3 paper's FA2 baseline (the
#: kernel behind torch SDPA's flash backend) does ~300-350 TFLOP/s fwd+bwd on H100 SXM, causal,
#: head_dim 128, i.e. ~0.32 of 989. Published; checked by tt-h100x8-fp8-32k (attention-heavy).
ATTENTION_EFFICIENCY = 0.32
ATTENTION_CAUSAL_FRACTION = 0.5

#: Memory-bound elementwise work per token per block (RMSNorm, RoPE, SiLU x up, residual adds,
#: their backward): HBM bytes = a x d_model + b x ffn_dim, by compile. Derived by counting the
#: reads and writes of the block's elementwise ops in bf16 (forward ~20 h + 6 f elements, backward
#: about twice that; 2 bytes each); compile fuses chains of them, roughly halving the traffic.
#: Run at HBM_EFFICIENCY of the GPU's bandwidth. This is what makes small models (small d_model)
#: reach a lower MFU than large ones on the same GPU.
ELEMENTWISE_BYTES: dict[bool, tuple[float, float]] = {False: (120.0, 36.0), True: (60.0, 18.0)}

#: Selective checkpointing (matmuls and attention saved) recomputes only elementwise ops: this
#: fraction of the block compute time. torchtitan reports ~3-5% for op-level SAC. Not fitted.
SELECTIVE_RECOMPUTE_TIME = 0.04

#: Fraction of the achieved link bandwidth: NCCL bus bandwidth / link peak for large all-gather
#: and reduce-scatter messages (nccl-tests on H100 NVLink4 ~370 of 450 GB/s; EFA ~ 0.7-0.8).
NVLINK_EFFICIENCY = 0.8
EFA_EFFICIENCY = 0.7

#: Fraction of the compute time FSDP2's communication can hide under (separate NCCL stream,
#: prefetch of one block). The first all-gather and the last reduce-scatter of each micro-batch are
#: always exposed. *Fitted* with MATMUL_EFFICIENCY on the five torchtitan rows (the best fit is
#: 1.0, i.e. full overlap on the 128- and 32-GPU rows; we keep a little margin).
COMM_OVERLAP = 0.95

#: Fused AdamW + grad-norm: bytes of HBM traffic per sharded parameter (read p, g, m, v fp32 and
#: write p, m, v = 28; grad-norm read 4), at this fraction of HBM bandwidth. Derived.
OPTIMIZER_BYTES_PER_PARAM = 32
HBM_EFFICIENCY = 0.7

#: Write rate of one host's checkpoint save, GB/s (DCP writes one file per rank to the local
#: /opt/ml/checkpoints volume; SageMaker uploads it to S3 in the background). A conservative
#: figure for one NVMe's sequential writes through Python file I/O; not measured on p6-b200.
CHECKPOINT_WRITE_GB_S = 2.0

# ---------------------------------------------------------------------------------------------
# Per GPU: how far the constants above hold there, and how sure we are (the range's width)
# ---------------------------------------------------------------------------------------------


class GpuCalibration(NamedTuple):
    """What the step-time constants mean on one GPU model (the first word of its catalog name)."""

    #: Multiplies MATMUL_EFFICIENCY and ATTENTION_EFFICIENCY on this GPU.
    compute_scale: float
    #: "fitted": FSDP2 rows measured on this GPU; "anchored": fitted on public FSDP2 rows of this
    #: GPU measured by others under conditions the catalog's part does not share (a power cap,
    #: an older stack); "carried": constants carried over from another GPU; "measured": timed on
    #: this machine at start.
    evidence: str
    source: str


#: Blackwell (B200, B300): what FSDP2 + torch.compile + torchao reach there, per FLOP of the
#: Hopper fit. *Fitted* on the public torchtitan rows of 8 x B200 (benchmarks/data/measurements.csv
#: tt-b200x8-bf16/fp8/mxfp8-compile, Llama3-8B seq 8192, 2025-08; all within 2.3%), their 750 W
#: cap modelled by B200_750W_DERATE. Until 2026-12-03 this was 0.93, carried from Hopper by
#: Megatron-Core's B200/H100 efficiency ratio: it put plans at 0.90 of NVIDIA's tuned Megatron-Core
#: figure (30,624 tokens/s/GPU), while the public FSDP2 results on Blackwell reach about half of
#: it per FLOP (benchmarks/data/blackwell_figures.csv; docs/planner.md, "Speed on B200").
BLACKWELL_SCALE = 0.48

GPU_CALIBRATION: dict[str, GpuCalibration] = {
    "H100": GpuCalibration(1.0, "fitted", "torchtitan H100 rows (500 W parts, derated)"),
    "H200": GpuCalibration(1.0, "fitted", "torchtitan H200 rows tt-h200x32/x64-fp8-compile"),
    "B200": GpuCalibration(
        BLACKWELL_SCALE, "anchored", "public torchtitan FSDP2 rows on 750 W B200s (2025-08)"
    ),
    "B300": GpuCalibration(
        BLACKWELL_SCALE, "anchored", "B200's (same dense tensor-core rate; no B300 rows)"
    ),
    # The measured rate is an achieved rate: undo the GPU matmul efficiency.
    "cpu": GpuCalibration(
        1.0 / MATMUL_EFFICIENCY[("bf16", False)],
        "measured",
        "this machine's bf16 matmul rate, timed at start (train/peak.py)",
    ),
}

#: Width of the speed range by evidence: (fraction below, fraction above) the point estimate of
#: tokens/s. Fitted: the FSDP rows are re-predicted within 9% (median 3%), so +-10/15% covers
#: them with margin; the low side is wider because what the model misses (stragglers, data
#: loading, NCCL tuning) only slows a run. Anchored (Blackwell): below, the fitted side's 15%
#: and 10% more for the assumed 750 W derate (a cap that costs less leaves the uncapped part
#: slower than predicted); above, 60%: the rows ran a 2025-08 stack (Blackwell kernels have
#: improved since) and FSDP2 reached ~0.8 of Megatron-Core per FLOP on H100 at equal power,
#: which here is ~1.6x the point; the best published figure caps it anyway. Carried: constants
#: from another GPU; 30% below. Measured (CPU): the demo's per-step error on a shared machine.
RANGE_BY_EVIDENCE: dict[str, tuple[float, float]] = {
    "fitted": (0.15, 0.10),
    "anchored": (0.25, 0.60),
    "carried": (0.30, 0.10),
    "measured": (0.35, 0.35),
    # A calibration profile fitted on this GPU's own runs (`bsm calibrate`): the default when the
    # profile does not record its own range (from its fit's residuals, docs/calibration.md).
    "calibrated": (0.10, 0.10),
}


def gpu_key(gpu_name: str) -> str:
    """The key of a GPU in GPU_CALIBRATION and in calibration profiles: its name's first word."""
    return gpu_name.split()[0] if gpu_name else ""


def gpu_calibration(gpu_name: str) -> GpuCalibration:
    """The calibration of the GPU named `gpu_name` (catalog name; its first word is the key).
    A GPU without an entry is `carried` with the fitted constants unchanged."""
    return GPU_CALIBRATION.get(gpu_key(gpu_name)) or GpuCalibration(
        1.0, "carried", "no rows: Hopper's fit"
    )


class Constants(NamedTuple):
    """The constants the step-time and memory models take on one GPU: the module's defaults
    (`constants_for`), or those a calibration profile (`planner/profile.py`) changed. Passed to
    the models as an argument; nothing here is ever mutated."""

    matmul_efficiency: dict[tuple[str, bool], float]
    attention_efficiency: float
    comm_overlap: float
    nvlink_efficiency: float
    efa_efficiency: float
    hbm_efficiency: float
    fragmentation: float
    compute_scale: float
    evidence: str
    #: (fraction below, fraction above) the speed's point estimate; None: RANGE_BY_EVIDENCE's.
    speed_range: tuple[float, float] | None = None

    @property
    def range(self) -> tuple[float, float]:
        return self.speed_range or RANGE_BY_EVIDENCE[self.evidence]


#: The constants a profile may change and `planner/fit.py` may fit (names of `Constants` fields;
#: matmul efficiency is one per (precision, compile) key).
FITTABLE = (
    "matmul_efficiency",
    "attention_efficiency",
    "comm_overlap",
    "nvlink_efficiency",
    "efa_efficiency",
    "hbm_efficiency",
    "fragmentation",
)


def constants_for(gpu_name: str) -> Constants:
    """The default constants on the GPU named `gpu_name` (no profile)."""
    cal = gpu_calibration(gpu_name)
    return Constants(
        dict(MATMUL_EFFICIENCY),
        ATTENTION_EFFICIENCY,
        COMM_OVERLAP,
        NVLINK_EFFICIENCY,
        EFA_EFFICIENCY,
        HBM_EFFICIENCY,
        FRAGMENTATION,
        cal.compute_scale,
        cal.evidence,
    )


#: Best published tokens/s/GPU for (GPU, model, precision, seq_len), from any stack: a plan's
#: point estimate above it carries a warning; the range's high end never passes it.
#: Source: NeMo 25.11 performance summary (Megatron-Bridge docs/performance-summary-archive.md),
#: rows mb-b200x8-*-upper and mb-h100x8-fp8-fsdp-upper of shared/reference/measurements.csv.
PUBLISHED_BEST: dict[tuple[str, str, str, int], tuple[float, str]] = {
    ("B200", "llama-3.1-8b", "fp8", 8192): (30624.0, "Megatron-Core + TE, DGX-B200 (NeMo 25.11)"),
    ("B200", "llama-3.1-8b", "mxfp8", 8192): (29521.0, "Megatron-Core + TE, DGX-B200 (NeMo 25.11)"),
    ("H100", "llama-3.1-8b", "fp8", 8192): (14451.0, "Megatron-FSDP + TE, DGX-H100 (NeMo 25.11)"),
}


# ---------------------------------------------------------------------------------------------
# Hardware of the measured rows that the catalog does not have
# ---------------------------------------------------------------------------------------------

#: The torchtitan H100 rows ran on H100 96 GB HBM2e parts capped at 500 W (Meta's Grand Teton),
#: not the 80 GB 700 W SXM part of ml.p5. Dense GEMMs on H100 are power-limited well below 700 W,
#: so sustained throughput scales about with the cap: 500/700 = 0.71. *Fitted* jointly with
#: MATMUL_EFFICIENCY (the H100 and H200 rows of the same model and batch agree at 0.72).
#: Used only by benchmarks/planner_accuracy.py, to build that GPU.
H100_500W_CLOCK_DERATE = 0.72
#: Usable memory of an H100 96 GB as nvidia-smi reports it (95,830 MiB).
H100_96GB_USABLE_GIB = 93.58
#: The public torchtitan B200 rows (benchmarks/data/measurements.csv, tt-b200x8-*) ran on B200s
#: power-limited to 750 W of their 1000 W (pytorch/ao#2777, #3566). The same rule as the H100
#: derate, throughput about proportional to the power cap: 750/1000. *Assumed*, not fitted (the
#: rows fit BLACKWELL_SCALE; the two cannot be told apart from them): the range's low side covers
#: a cap that costs less. Used only to build that GPU for the benchmark and `bsm calibrate`.
B200_750W_DERATE = 0.75

# ---------------------------------------------------------------------------------------------
# Choices (not physics): thresholds the search uses to prefer the simpler configuration
# ---------------------------------------------------------------------------------------------

#: Candidates within this fraction of the fastest time to train are ties. Among ties the simplest
#: that uses at most COMFORT_FRACTION of the usable memory wins, else (every tie is tighter) the one
#: needing the least: free memory absorbs allocator spikes the model does not see. Not "always the
#: least memory": the step model has no micro-batch efficiency term, so a pure least-memory rule
#: would pick micro-batch 1 wherever speed is flat, which is slower on a real GPU.
TIE_FRACTION = 0.01
COMFORT_FRACTION = 0.85
#: Context parallelism is searched only from this sequence length: below it a sequence's
#: activations are small beside the weights' state, and the K/V gathers cost more than they save.
CP_MIN_SEQ = 16384
#: "Near miss": a runner-up at least this much faster that misses the usable limit by at most
#: NEAR_MISS_MEMORY gets advice on what would make it fit.
NEAR_MISS_SPEEDUP = 0.10
NEAR_MISS_MEMORY = 0.05
#: A plan whose exposed communication is over this fraction of the step is communication-bound.
COMM_BOUND_FRACTION = 0.20
#: `precision: auto` picks fp8/mxfp8 only when predicted faster than bf16 by at least this much:
#: low precision carries numerical risk (loss spikes, divergence on small models) that a few
#: percent of speed does not pay for.
LOWP_MIN_GAIN = 0.10
#: ... and only for models at least this large: small models gain little (their time goes to the
#: bf16 head, attention and memory-bound ops) and are the most sensitive to fp8 numerics.
LOWP_MIN_PARAMS = 3e9
