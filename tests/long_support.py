"""Spawned-process bodies of the long-context tests (gloo, CPU): the chunked loss with an
FSDP2-sharded head, and context parallelism against the same model unsharded.

Each worker checks many cases in one set of processes (a spawn costs seconds) and raises on the
first difference; `train_support.spawn` re-raises it in the test.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from model_support import small_spec

from blackwell_sm.spec import ModelSpec

CP = dict(family="qwen3", d_model=64, head_dim=32, ffn_dim=160, vocab_size=211, max_seq_len=128)
SPEC = small_spec(name="cp", **CP)
TIED = SPEC.model_copy(
    update={"name": "cp-tied", "family": "llama", "tie_embeddings": True, "head_dim": 16}
)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30))


def _reference(spec: ModelSpec, seq: int, batch: tuple, impl: str):
    """(loss, {name: grad}) of the unsharded fp32 model (same seeded init)."""
    from blackwell_sm.train.loss import loss_sum
    from blackwell_sm.train.model import Transformer

    ref = Transformer(spec, max_seq_len=seq)
    ref.init_weights(0)
    ref.loss_impl = impl
    loss = loss_sum(ref, *batch)
    loss.backward()
    return ref, loss.detach(), {n: p.grad for n, p in ref.named_parameters()}


def _sharded(spec: ModelSpec, seq: int, mesh, cp, impl: str, ac: str = "none"):
    from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing
    from blackwell_sm.train.model import Transformer
    from blackwell_sm.train.parallelize import apply_fsdp, materialize

    with torch.device("meta"):
        model = Transformer(spec, max_seq_len=seq)
    model.loss_impl = impl
    model.set_context_parallel(cp)
    apply_activation_checkpointing(model, ac)
    apply_fsdp(model, mesh, reshard_after_forward=True, param_dtype=torch.float32)
    materialize(model, torch.device("cpu"), 0)
    return model


def _batch(spec: ModelSpec, b: int, seq: int, packed: bool, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, spec.vocab_size, (b, seq + 1), generator=g)
    if not packed:
        return (tokens,)
    mask = (torch.rand(b, seq + 1, generator=g) > 0.25).long()
    starts = torch.rand(b, seq + 1, generator=g) < 0.08  # documents cross the CP chunks
    starts[:, 0] = True
    return tokens, mask, torch.cumsum(starts.long(), dim=1)


def equivalence_worker(tol: float) -> None:
    """`check_sharded_head`, then `check_context_parallel`, in one process group."""
    from blackwell_sm.train.distributed import init_distributed

    env = init_distributed()
    check_sharded_head(env, tol)
    check_context_parallel(env, tol)
    check_cp_saved_bytes(env)
    dist.destroy_process_group()


def _saved_bytes(model, tokens: torch.Tensor, mode: str) -> int:
    """Bytes of the distinct storages autograd holds for backward once the forward is done
    (saved-tensor hooks; weak references drop what a freed graph node had saved, so a reused
    address is not mistaken for a kept tensor); parameters and buffers excluded."""
    import weakref

    from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing

    apply_activation_checkpointing(model, mode)
    exclude = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    refs: list[weakref.ref] = []

    def pack(t):
        refs.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(tokens)
    alive = [t for t in (r() for r in refs) if t is not None]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in alive}
    out.float().sum().backward()
    return sum(n for p, n in storages.items() if p not in exclude)


def check_cp_saved_bytes(env) -> None:
    """What a context-parallel rank keeps for backward equals the planner's terms, to the byte
    (bf16; CPU's composite norm): the activations of its seq/cp tokens, the attention mask (a
    (1, 1, s/cp, s) causal-by-position mask: dense on CPU; its bf16 additive copy per block
    without checkpointing) and, without checkpointing, every block's gathered K/V and their
    expansion to all heads (`memory.context_parallel_bytes`, `memory.attention_mask_bytes`);
    plus the RoPE rows of its positions (a gathered copy; without CP a view of the shared table)."""
    from torch.distributed.device_mesh import init_device_mesh

    from blackwell_sm.planner import memory
    from blackwell_sm.planner.shape import shape
    from blackwell_sm.train.context_parallel import CpGroup
    from blackwell_sm.train.model import Transformer

    mesh = init_device_mesh("cpu", (1, env.world_size), mesh_dim_names=("dp", "cp"))
    cp = CpGroup.from_mesh(mesh)
    b, seq = 2, 64
    local = seq // cp.degree
    model = Transformer(SPEC, max_seq_len=seq)
    model.init_weights(0)
    model.to(torch.bfloat16)
    model.set_context_parallel(cp)
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, SPEC.vocab_size, (b, local), generator=g)
    for mode in ("none", "full"):
        got = _saved_bytes(model, tokens, mode)
        want = memory.saved_activation_bytes(shape(SPEC), b, local, mode, fused_norm=False)
        want += (
            memory.context_parallel_bytes(shape(SPEC), b, seq, cp.degree, mode)
            if mode == "none"
            else 0
        )
        want += memory.attention_mask_bytes(
            shape(SPEC), b, seq, mode, packed=False, cp_degree=cp.degree, kind="cpu"
        )
        want += 2 * local * SPEC.head_dim * 2  # the RoPE rows of this rank's positions (bf16)
        assert got == want, (mode, got, want, got - want)


def check_sharded_head(env, tol: float) -> None:
    """The chunked loss under FSDP2 (2 ranks; head weight sharded, gathered in the root's
    forward), tied and untied, with ignored tokens: loss and every gradient equal the unsharded
    full-logits reference (fp32 compute) within `tol`."""
    from torch.distributed.device_mesh import init_device_mesh

    from blackwell_sm.train.loss import loss_sum

    mesh = init_device_mesh("cpu", (env.world_size,), mesh_dim_names=("shard",))
    seq = 48
    for spec in (SPEC, TIED):
        batch = _batch(spec, 2, seq, packed=True, seed=3 + env.rank)
        _, ref_loss, ref_grads = _reference(spec, seq, batch, "full-logits")
        model = _sharded(spec, seq, mesh, None, "chunked")
        loss = loss_sum(model, *batch)
        loss.backward()  # FSDP averages the two ranks' gradients
        assert _rel(loss.detach(), ref_loss) < tol, (spec.name, loss, ref_loss)
        for name, p in model.named_parameters():
            mine = p.grad.full_tensor() * env.world_size
            theirs = ref_grads[name].clone()
            dist.all_reduce(theirs)  # the sum over both ranks' batches
            assert _rel(mine, theirs) < tol, (spec.name, name, _rel(mine, theirs))


def check_context_parallel(env, tol: float) -> None:
    """Context parallelism (cp = 2 on 2 ranks; FSDP shards over the same ranks) against the
    unsharded model, fp32: the logits of each rank's positions (RoPE at global positions), the
    loss summed over the CP ranks, and every gradient; causal and packed documents that cross
    the chunks; no checkpointing and full / selective-op (the K/V gather runs again in the
    recompute); both loss paths."""
    from torch.distributed.device_mesh import init_device_mesh

    from blackwell_sm.train.context_parallel import CpGroup
    from blackwell_sm.train.loss import counted_targets, loss_sum

    mesh = init_device_mesh("cpu", (env.world_size,), mesh_dim_names=("shard",))
    cp = CpGroup.from_mesh(
        init_device_mesh("cpu", (1, env.world_size), mesh_dim_names=("dp", "cp"))
    )
    assert (cp.degree, cp.rank) == (2, env.rank)
    seq = 64
    cases = [
        (SPEC, False, "none", "chunked"),
        (SPEC, True, "none", "chunked"),
        (SPEC, True, "full", "full-logits"),
        (TIED, True, "selective-op", "chunked"),
    ]
    for spec, packed, ac, impl in cases:
        batch = _batch(spec, 2, seq, packed, seed=11)  # the same rows on both CP ranks
        ref, ref_loss, ref_grads = _reference(spec, seq, batch, impl)
        model = _sharded(spec, seq, mesh, cp, impl, ac)
        where = (spec.name, packed, ac, impl)
        # logits at this rank's global positions
        pos = cp.positions(seq)
        docs = None if len(batch) == 1 else batch[2][:, :-1]
        with torch.no_grad():
            mine = model(cp.shard(batch[0][:, :-1], seq), docs, positions=pos)
            theirs = ref(batch[0][:, :-1], docs)[:, pos]
        assert _rel(mine, theirs) < tol, (where, "logits", _rel(mine, theirs))
        # the loss: each rank its share, summed over the CP group = the whole sequence's
        loss = loss_sum(model, *batch)
        n = torch.tensor(counted_targets(*batch, cp=cp))
        total = loss.detach().clone()
        dist.all_reduce(total)
        dist.all_reduce(n)
        assert _rel(total, ref_loss) < tol, (where, "loss", total, ref_loss)
        assert n == counted_targets(*batch), (where, "counted", n)
        loss.backward()
        for name, p in model.named_parameters():
            g = p.grad.full_tensor() * env.world_size  # FSDP averaged over the 2 ranks
            assert _rel(g, ref_grads[name]) < tol, (where, name, _rel(g, ref_grads[name]))


def loop_runs_worker(jobs: list[tuple[str, str, str | None]], ports: list[int]) -> None:
    """Training runs one after another in the same processes (fp32 compute, the test hook
    BSM_TEST_FP32_COMPUTE): each job is (plan JSON, /opt/ml dir, a checkpoint directory to
    start from or None: rank 0 copies it into the job's checkpoints/ first)."""
    import os
    import shutil
    import time
    from pathlib import Path

    from train_support import train_worker

    from blackwell_sm.opt_ml import ENV_TEST_FP32_COMPUTE

    os.environ[ENV_TEST_FP32_COMPUTE] = "1"
    for (plan_json, opt_ml, seed_from), port in zip(jobs, ports, strict=True):
        os.environ["MASTER_PORT"] = str(port)
        ready = Path(opt_ml, "seeded")
        if seed_from is not None:
            if os.environ["RANK"] == "0":
                src = Path(seed_from)
                shutil.copytree(src, Path(opt_ml, "checkpoints", src.name))
                ready.touch()
            while not ready.exists():
                time.sleep(0.05)
        train_worker(plan_json, opt_ml)
