"""Worker entry point: `python -m blackwell_sm.train.main --plan PLAN.json --opt-ml DIR`.

Started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK in the environment). Exit 0 when training is
done or was stopped cleanly after a save; a toolkit error exits with its code after printing it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    from blackwell_sm.errors import BsmError
    from blackwell_sm.opt_ml import root_from_env
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.train.loop import train

    p = argparse.ArgumentParser(prog="python -m blackwell_sm.train.main", description=__doc__)
    p.add_argument("--plan", required=True, type=Path, help="plan.json from the planner")
    p.add_argument("--opt-ml", type=Path, default=root_from_env(),
                   help="the /opt/ml-shaped root (default $BSM_OPT_ML or /opt/ml)")  # fmt: skip
    args = p.parse_args(argv)

    @record  # torchrun's error file carries the exception and rank to the launcher
    def _run() -> int:
        from pydantic import ValidationError

        from blackwell_sm.safe_load import load_mapping
        from blackwell_sm.spec.run import spec_error

        try:  # the one safe loader: size cap, UTF-8, no duplicate keys, no NaN
            plan = Plan.model_validate(load_mapping(args.plan, field="plan.json", fmt="json"))
        except ValidationError as e:  # each field by its path in the plan
            raise spec_error(e, root=Plan, source=f"plan {args.plan}") from None
        except (OSError, ValueError) as e:
            raise BsmError(f"cannot read the plan {args.plan}: {e}") from e
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


if __name__ == "__main__":
    sys.exit(main())
