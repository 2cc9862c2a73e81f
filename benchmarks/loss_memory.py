"""The chunked loss against the full-logits one on CPU: peak memory of one loss + backward (from
the CPU allocator's own counter, read through torch.profiler's allocation events), wall time,
and the loss and gradient agreement; plus the planner's `logits_and_loss` term for both.

    .venv/bin/python benchmarks/loss_memory.py [--tokens 8192] [--d-model 1024] [--vocab 32000]

One JSON line per figure (`_common.emit`). The CUDA figures (compact policy, bf16 kernels) come
from benchmarks/gpu_check.py on a GPU; this machine has none.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, note


def cpu_peak_bytes(fn: Callable[[], object]) -> tuple[int, int]:
    """(peak, end) bytes the CPU allocator held above its level when `fn` started."""
    from blackwell_sm.train.trace import allocator_rise

    return allocator_rise(fn)


def measure(tokens: int, d_model: int, vocab: int, dtype_name: str, seed: int = 0) -> dict:
    """One loss + backward per path on random (tokens x d_model) inputs and a (vocab x d_model)
    head, a seventh of the targets ignored: peak and retained bytes, seconds, and the chunked
    path's relative error against the full-logits one (loss, input and weight gradients)."""
    import torch

    from blackwell_sm.train.loss import IGNORE_INDEX, head_loss

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(seed)
    h0 = torch.randn(tokens, d_model, generator=g)
    w0 = torch.randn(vocab, d_model, generator=g) * 0.05
    t = torch.randint(0, vocab, (tokens,), generator=g)
    t[::7] = IGNORE_INDEX
    out: dict = {}
    for impl in ("full-logits", "chunked"):
        h = h0.to(dtype).requires_grad_()
        w = w0.to(dtype).requires_grad_()
        box: dict = {}

        def step(h=h, w=w, box=box, impl=impl):
            loss = head_loss(h, w, t, impl)
            loss.backward()
            box["loss"] = loss.detach()

        step()  # warm-up (first-call allocations), then measured
        h.grad = w.grad = None
        t0 = time.perf_counter()
        peak, end = cpu_peak_bytes(step)
        out[impl] = {
            "peak": peak,
            "end": end,
            "s": time.perf_counter() - t0,
            "loss": box["loss"].double(),
            "gh": h.grad.double(),
            "gw": w.grad.double(),
        }
    ref, ch = out["full-logits"], out["chunked"]

    def rel(a, b):
        return float((a - b).norm() / b.norm())

    out["err"] = {
        "loss": rel(ch["loss"], ref["loss"]),
        "grad_input": rel(ch["gh"], ref["gh"]),
        "grad_weight": rel(ch["gw"], ref["gw"]),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32000)
    args = ap.parse_args(argv)
    import torch

    from blackwell_sm.spec.long_context import chunked_loss_bytes, loss_bytes

    torch.set_num_threads(max(1, torch.get_num_threads()))
    n, h, v = args.tokens, args.d_model, args.vocab
    for dtype in ("float32", "bfloat16"):
        note(f"loss memory: {n} tokens x d {h} x vocab {v}, {dtype}")
        r = measure(n, h, v, dtype)
        size = 4 if dtype == "float32" else 2
        # What the measured peak holds besides the loss's term: the weight gradient it returns
        # (the planner counts it in grads_unsharded; the input gradient is in the term).
        grads = v * h * size
        for impl in ("full-logits", "chunked"):
            m = r[impl]
            pre = f"loss.{dtype}.{impl}"
            emit(f"{pre}.peak_mib", round(m["peak"] / 2**20, 1), "MiB")
            emit(f"{pre}.s", round(m["s"], 3), "s")
        model = chunked_loss_bytes(v, h, n, kind="cpu", dtype_bytes=size) + grads
        emit(
            f"loss.{dtype}.chunked.model_cpu_mib",
            round(model / 2**20, 1),
            "MiB",
            reference=round(r["chunked"]["peak"] / 2**20, 1),
        )
        emit(
            f"loss.{dtype}.full-logits.model_mib",
            round(loss_bytes("full-logits", v, h, n) / 2**20, 1),
            "MiB",
            reference=round(r["full-logits"]["peak"] / 2**20, 1),
        )
        emit(
            f"loss.{dtype}.peak_ratio",
            round(r["chunked"]["peak"] / r["full-logits"]["peak"], 4),
            "x",
            target="< 0.5",
        )
        tol = {"float32": 1e-6, "bfloat16": 1e-2}[dtype]
        for k, e in r["err"].items():
            emit(f"loss.{dtype}.rel_err.{k}", e, "rel", target=f"< {tol:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
