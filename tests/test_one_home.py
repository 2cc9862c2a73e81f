"""One home per fact (issue 32 item 5): the status sentence, the job count, batch arithmetic and
the step-time composition each have one module; a second place that words or computes them
fails here (a scan of the package's source), and the facts read right where they used to be
wrong (context parallelism in the batch, "1 sequences")."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from blackwell_sm.api.plan import plan

PKG = Path(__file__).resolve().parents[1] / "blackwell_sm"

# (what, pattern, the one module allowed to hold it; None: no module)
HOMES = [
    (
        "the status sentence",
        r"does NOT fit|fits in memory, but|misses the deadline\"",
        "planner/summary.py",
    ),
    ("the job count", r"ceil\([^)]*MAX_RUNTIME_HOURS", "planner/jobs.py"),
    ("data-parallel ranks", r"world\w*\s*//\s*\(?\s*[\w.]*cp_degree", "planner/batch.py"),
    ("the global batch", r"micro_batch\w*\s*\*\s*[\w.]*grad_accum\w*\s*\*", "planner/batch.py"),
    ("a batch counted in GPUs", r"\} GPUs = ", None),
    ("the step's composition", r"grad_accum\w*\s*\*\s*\(\s*compute", "planner/step_time.py"),
    (
        "a micro-batch's compute",
        r"\*\s*\(\s*(base|per_token\[0\])\s*\+",
        "planner/step_time.py",
    ),
    (
        "which precisions are low, and their order",
        r'[({]\s*"fp8",\s*"mxfp8"\s*[)}]|\(\s*"bf16",\s*"fp8"|"bf16":\s*0',
        None,  # derived in planner/precision.py from the spec's Precision
    ),
]

# Copies allowed elsewhere, each with what would replace it (none left: the container's batch
# arithmetic and the bundle's torchao rule read the one home too).
ELSEWHERE: dict[str, str] = {}


def homes_of(pattern: str, root: Path = PKG) -> list[str]:
    """The modules (relative to `root`) whose source matches `pattern`."""
    rx = re.compile(pattern)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if rx.search(p.read_text()))


@pytest.mark.parametrize(("what", "pattern", "home"), HOMES, ids=[h[0] for h in HOMES])
def test_each_fact_has_one_home(what: str, pattern: str, home: str | None) -> None:
    found = [m for m in homes_of(pattern) if m not in ELSEWHERE]
    assert found == ([home] if home else []), f"{what} belongs in {home} only"


def test_the_scan_finds_a_second_home(tmp_path: Path) -> None:
    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "jobs.py").write_text("n = math.ceil(h / MAX_RUNTIME_HOURS)\n")
    (tmp_path / "other.py").write_text("jobs = max(1, math.ceil(hours / MAX_RUNTIME_HOURS))\n")
    assert homes_of(HOMES[1][1], tmp_path) == ["other.py", "planner/jobs.py"]


def test_batch_arithmetic_counts_data_parallel_ranks_under_context_parallelism() -> None:
    """At cp 8 on 8 GPUs one rank group reads one sequence: "x 1 data-parallel rank = 1
    sequence", never "x 8 GPUs = 8 sequences" or "1 sequences"."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(
            "llama-3.1-8b",
            seq_len=131072,
            cp_degree=8,
            global_batch_tokens=131072,
            allow_infeasible=True,
        )
    c = p.config
    assert c.cp_degree == 8 and c.data_parallel_size == c.world_size // 8
    text = p.summary()
    assert "x 1 data-parallel rank = 1 sequence of 131,072" in " ".join(text.split())
    assert "1 sequences" not in text and "GPUs =" not in " ".join(p.reasons)
