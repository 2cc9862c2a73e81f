"""The container's command: read /opt/ml, set the network environment, supervise torchrun.

`python -m blackwell_sm.launch --plan PLAN.json [--opt-ml DIR] [--dry-run]`

One launcher runs per host (SageMaker starts the same command on every instance). It

1. reads `DIR/input/config/resourceconfig.json` and the plan, and derives the torchrun topology:
   hosts in natural order (`algo-2` before `algo-10`), node rank = this host's index in that
   order, master = the first host (or `$BSM_MASTER_ADDR`), port `$BSM_MASTER_PORT` or 29500,
   processes per node = the plan's `gpus_per_instance`;
2. refuses a host count different from the plan's `instance.count`, a plan whose process count
   does not match its mesh, and (on CUDA) fewer visible GPUs than the plan needs;
3. sets the NCCL/EFA environment for EFA instances (p5, p5en, p6-b200, p6-b300) and drops the
   `NCCL_PROTO=simple` the SageMaker SDK's own driver forces;
4. runs `python -m torch.distributed.run` (static rendezvous) on the worker
   `blackwell_sm.train.main`, forwards SIGTERM/SIGINT to every worker, reports which NCCL network
   NCCL chose, and exits with the workers' status;
5. on failure writes the real reason (the failing rank's exception from its torchelastic error
   file, else the signal or exit code and the tail of its stderr) to `DIR/output/failure`, whose
   first 1024 characters SageMaker shows as the job's FailureReason.

It imports neither torch (except to count GPUs on CUDA plans) nor boto3/sagemaker, and takes
every hardware fact (device kind, EFA) from the plan, not from the catalog.

Its own layer beside `train/` because it runs before torchrun and must stay torch-free (the layer
test holds it to that): `topology` (hosts, ranks, master), `network` (NCCL/EFA variables),
`supervise` (torchrun, signals, NCCL's choices), `failure` (output/failure), `main` (the command).
"""

from __future__ import annotations

import sys

WORKER_MODULE = "blackwell_sm.train.main"
LOG = "[bsm-launch]"


def log(msg: str) -> None:
    """One launcher line on stderr."""
    print(f"{LOG} {msg}", file=sys.stderr, flush=True)
