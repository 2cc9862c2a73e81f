"""The achieved matmul rate of this machine's CPU, for `bsm run-local`'s plan: a short timed
bf16 matmul with the worker's own kernels and thread count (torchrun gives each worker one
thread; one worker gets them all), instead of a nominal peak: the best call once it is stable,
so that a busy machine does not make the peak low and the MFU above 1. Run as
`python -m blackwell_sm.train.peak M K N THREADS`; prints one JSON object
{"flops_per_s": ..., "shape": [M, K, N], "threads": ..., "seconds": ...}.
"""

from __future__ import annotations

import json
import sys
import time

BUDGET_S = 0.25  # timed work at least, after one warm-up call
MAX_S = 3.0  # and at most, when the rate will not settle (a busy machine)
STABLE_CALLS = 8  # calls in a row that do not beat the best by STABLE_GAIN: settled
STABLE_GAIN = 0.02


def measure(
    m: int, k: int, n: int, *, budget_s: float = BUDGET_S, threads: int = 1, max_s: float = MAX_S
) -> float:
    """FLOP/s of an (m x k) @ (k x n) bf16 matmul, forward and the two backward products, on
    `threads` threads: the best single call, timed call by call for at least `budget_s` seconds
    and until the best stands for `STABLE_CALLS` calls (at most `max_s`). The best call, not the
    mean: on a busy machine other processes only ever slow a call down, so the mean is low by as
    much as the machine is busy (25-250x was seen), and an MFU measured against it exceeds 1."""
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
    flops = 3 * 2.0 * m * k * n
    best, since_best, start = 0.0, 0, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        once()
        t1 = time.perf_counter()
        rate = flops / max(t1 - t0, 1e-9)
        if rate > best * (1 + STABLE_GAIN):
            since_best = 0
        else:
            since_best += 1
        best = max(best, rate)
        elapsed = t1 - start
        if elapsed >= max_s or (elapsed >= budget_s and since_best >= STABLE_CALLS):
            return best


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
