"""Worker entry point: `python -m blackwell_sm.train.main --plan PLAN.json --opt-ml DIR`.

Started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK in the environment). Exit 0 when training is
done or was stopped cleanly after a save; a toolkit error exits with its code after printing it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from blackwell_sm.opt_ml import ENV_TEST_ABORT_AT_EXIT


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    from blackwell_sm.errors import BsmError
    from blackwell_sm.opt_ml import root_from_env
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.train.loop import train

    p = argparse.ArgumentParser(prog="python -m blackwell_sm.train.main", description=__doc__)
    p.add_argument("--plan", required=True, type=Path, help="plan.json from the planner")
    p.add_argument(
        "--opt-ml",
        type=Path,
        default=root_from_env(),
        help="the /opt/ml-shaped root (default $BSM_OPT_ML or /opt/ml)",
    )
    args = p.parse_args(argv)

    @record  # torchrun's error file carries the exception and rank to the launcher
    def _run() -> int:
        plan = Plan.read(args.plan)  # the launcher's reader: safe loader, fields by path
        if not plan.feasible:
            raise BsmError(
                f"the plan in {args.plan} is not feasible; refusing to run it",
                hint="; ".join(plan.advice) or "re-plan with a smaller batch or more GPUs",
            )
        train(plan, args.opt_ml)
        return 0

    try:
        return _run()
    except BsmError as e:
        rank = os.environ.get("RANK", "0")
        print(f"[bsm] error on rank {rank}: {e}", file=sys.stderr, flush=True)
        raise


def exit_now(rc: int) -> None:
    """Leave the worker with `rc` without interpreter teardown, after flushing our streams.

    Why: after `destroy_process_group()` the gloo process group's C++ threads (gloo_tcp_loop,
    pt_gloo_runloop) are still running, because Python objects outlive the run and keep the group
    alive (DeviceMesh via cached DTensorSpecs; checked on torch 2.13 by listing
    /proc/self/task after a run). They are then destroyed during interpreter finalisation, in
    whatever order module globals and static objects fall, and a still-joinable std::thread
    destroyed there is `terminate called without an active exception` / `Fatal Python error:
    Aborted` (about 3 % of runs on a 2-core machine). Everything this process owes is on disk by
    now (checkpoint, export and summary.json written, every rank past a barrier), so skipping
    finalisation loses nothing.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    # Test-only hook: abort after a completed run, as the rare teardown abort did; the launcher
    # must still count the run a success (tests/test_launch_exits.py).
    if rc == 0 and os.environ.get(ENV_TEST_ABORT_AT_EXIT) == os.environ.get("RANK", "0"):
        os.abort()
    os._exit(rc)


if __name__ == "__main__":
    # An exception propagates as usual (torchrun's @record already wrote its error file); only a
    # normal return takes the short way out.
    exit_now(main())
