"""Context parallelism's numerics on one device (gpu_check's `cp-numerics` run).

What one GPU can check: the sharded-sequence bookkeeping. For each CP degree, every rank's
queries (its two chunks, `CpGroup.positions`) attend to the gathered keys and values (in the
order `CpGroup.all_positions` gives) under the mask `train/attention.py` builds from global
positions and document ids; the ranks' outputs, put back in position order, must equal attention
over the whole sequence on one rank, forward and backward (the key and value gradients summed
over ranks, as the gather's reduce-scatter does). The single-rank path (cp 1) is the reference.
The collectives themselves (all-gather, reduce-scatter over NCCL) and FSDP over the CP ranks
need two GPUs: tests/test_context_parallel*.py run them over gloo on CPU.
"""

from __future__ import annotations

from typing import Any

#: dense_max for each mask form: every mask dense, or every mask FlexAttention's block mask.
FORMS = {"dense": 2**62, "block": 0}


def _attention(q, k, v, doc_ids, *, q_pos, kv_pos, form: str):
    """Attention under the position mask (cp_degree > 1 keeps SDPA's causal shortcut out)."""
    from blackwell_sm.train.attention import attend, build_mask

    mask = build_mask(
        doc_ids,
        q_pos=q_pos,
        kv_pos=kv_pos,
        micro_batch=q.shape[0],
        cp_degree=2,
        dense_max=FORMS[form],
    )
    return attend(q, k, v, mask), mask.kind


def cp_numerics(device_type: str, *, seq: int, degrees: tuple[int, ...] = (2, 4)) -> dict[str, Any]:
    """Max relative errors of CP attention against whole-sequence attention, per degree, with
    and without packed documents; the mask form each used."""
    import torch

    from blackwell_sm.train.context_parallel import CpGroup

    device = torch.device(device_type)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)
    b, heads, kv_heads, hd = 1, 8, 2, 64
    shape_q, shape_kv = (b, heads, seq, hd), (b, kv_heads, seq, hd)
    q0 = torch.randn(shape_q, generator=g).to(device, dtype)
    k0 = torch.randn(shape_kv, generator=g).to(device, dtype)
    v0 = torch.randn(shape_kv, generator=g).to(device, dtype)
    docs = torch.cumsum(torch.rand(b, seq, generator=g) < 8 / seq, dim=1).to(device)
    pos = torch.arange(seq, device=device)
    rows: dict[str, Any] = {}
    forms = list(FORMS) if device.type == "cuda" else ["dense"]  # CPU: dense only (mask_kind)
    for packed, form in ((p, f) for p in (False, True) for f in forms):
        doc_ids = docs if packed else None
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        # the reference: the whole sequence on one rank (cp 1) under the same mask form
        ref, ref_kind = _attention(q, k, v, doc_ids, q_pos=pos, kv_pos=pos, form=form)
        ref.float().square().sum().backward()
        for cp in degrees:
            qc, kc, vc = (t.clone().requires_grad_() for t in (q0, k0, v0))
            out = torch.empty_like(ref)
            kinds = set()
            ranks = [CpGroup(cp, r) for r in range(cp)]
            order = ranks[0].all_positions(seq, device)  # the gathered order of K/V
            k_all, v_all = kc[:, :, order], vc[:, :, order]
            for grp in ranks:
                mine = grp.positions(seq, device)
                o, kind = _attention(
                    qc[:, :, mine], k_all, v_all, doc_ids, q_pos=mine, kv_pos=order, form=form
                )
                out[:, :, mine] = o
                kinds.add(kind)
            out.float().square().sum().backward()
            name = f"cp{cp}-{form}{'-packed' if packed else ''}"
            rows[name] = {
                "mask": sorted(kinds),
                "reference_mask": ref_kind,
                "out_rel_err": _rel(out, ref),
                "grad_q_rel_err": _rel(qc.grad, q.grad),
                "grad_k_rel_err": _rel(kc.grad, k.grad),
                "grad_v_rel_err": _rel(vc.grad, v.grad),
            }
    return rows


def _rel(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


#: bf16 attention on CUDA through FlexAttention's tiles differs from one kernel call over the
#: whole sequence by rounding only; fp32 on CPU to ~1e-6.
TOLERANCE = {"cuda": 2e-2, "cpu": 1e-4}


def within_tolerance(rows: dict[str, Any], device_type: str) -> bool:
    tol = TOLERANCE[device_type]
    return all(v <= tol for r in rows.values() for k, v in r.items() if k.endswith("_rel_err"))
