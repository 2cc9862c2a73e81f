"""Search speed: time to plan every preset on every catalogued instance type with
instance_count auto (one JSON line per figure). Target: <= 100 ms for llama-64b's full search on
ml.p6-b200.48xlarge. Median of several runs, in process (imports excluded).
"""

from __future__ import annotations

import json
import statistics
import time

from blackwell_sm.hardware import CATALOG
from blackwell_sm.planner.api import make_plan
from blackwell_sm.spec import PRESETS, parse_spec

RUNS = 5


def main() -> None:
    for name in PRESETS:
        for itype in CATALOG:
            spec = parse_spec(
                {"model": name, "compute": {"instance_type": itype, "instance_count": "auto"}}
            )
            times = []
            for _ in range(RUNS):
                t0 = time.perf_counter()
                p = make_plan(spec)
                times.append(time.perf_counter() - t0)
            target = 100.0 if (name, itype) == ("llama-64b", "ml.p6-b200.48xlarge") else None
            print(
                json.dumps(
                    {
                        "name": f"planner_search.{name}.{itype}.ms",
                        "value": round(statistics.median(times) * 1e3, 1),
                        "unit": "ms",
                        "reference": target,
                        "instance_count": p.instance.count,
                        "feasible": p.feasible,
                        "config": p.config.model_dump(),
                    }
                )
            )
    spec = parse_spec(
        {"model": "llama-64b", "compute": {"instance_count": "auto", "deadline_hours": 24}}
    )
    t0 = time.perf_counter()
    p = make_plan(spec)
    print(
        json.dumps(
            {
                "name": "planner_search.llama-64b.deadline-24h.ms",
                "value": round((time.perf_counter() - t0) * 1e3, 1),
                "unit": "ms",
                "reference": None,
                "instance_count": p.instance.count,
                "hours": p.run.hours,
            }
        )
    )


if __name__ == "__main__":
    main()
