"""The achieved matmul rate of this machine's CPU, for `bsm run-local`'s plan: a short timed
bf16 matmul with the worker's own kernels and thread count (torchrun gives each worker one
thread; one worker gets them all), instead of a nominal peak. Run as
`python -m blackwell_sm.train.peak M K N THREADS`; prints one JSON object
{"flops_per_s": ..., "shape": [M, K, N], "threads": ..., "seconds": ...}.
"""

from __future__ import annotations

import json
import sys
import time

BUDGET_S = 0.25  # timed work, after one warm-up call


def measure(m: int, k: int, n: int, *, budget_s: float = BUDGET_S, threads: int = 1) -> float:
    """FLOP/s of an (m x k) @ (k x n) bf16 matmul, forward and the two backward products, timed
    for about `budget_s` seconds on `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(m, k, dtype=torch.bfloat16)
    b = torch.randn(k, n, dtype=torch.bfloat16)
    g = torch.randn(m, n, dtype=torch.bfloat16)

    def once() -> None:
        torch.mm(a, b)  # forward
        torch.mm(g, b.t())  # grad input
        torch.mm(a.t(), g)  # grad weight

    once()
    calls, start = 0, time.perf_counter()
    while True:
        once()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s:
            return 3 * 2.0 * m * k * n * calls / elapsed


def main(argv: list[str]) -> None:
    m, k, n, threads = (int(x) for x in argv[:4])
    start = time.perf_counter()
    rate = measure(m, k, n, threads=threads)
    out = {
        "flops_per_s": rate,
        "shape": [m, k, n],
        "threads": threads,
        "seconds": time.perf_counter() - start,
    }
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
