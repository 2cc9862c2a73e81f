"""A two-host job on one machine: two launchers, each with its own /opt/ml (resourceconfig.json
naming algo-1 or algo-2), the master address resolved to loopback, two CPU processes each, and
hybrid sharding 2 (replicas) x 2 (shards). It trains, checkpoints and resumes like the single-host
run: after SIGKILL of a rank on the second host and a restart (with SageMaker's checkpoint sync
between the hosts), the losses equal those of an uninterrupted two-host run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import (
    Launch,
    OptMlHost,
    complete_checkpoints,
    free_port,
    start_hosts,
    sync_checkpoints,
)

from blackwell_sm.hardware import local_instance
from blackwell_sm.planner.api import make_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec import load_spec, with_overrides

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
HOSTS = ["algo-1", "algo-2"]


def hsdp_plan() -> Plan:
    """The planner's plan for 4 local processes pinned to HSDP 2 x 2, split over two hosts of
    two processes (the planner treats a local instance as one machine; the mesh is the same)."""
    spec = with_overrides(
        load_spec(REPO / "templates" / "demo-tiny.yaml"),
        {
            "replicate_degree": 2,
            "shard_degree": 2,
            "training.total_steps": 10,
            "training.checkpoint.interval_steps": 4,
        },
    )
    plan = make_plan(spec, instance=local_instance(nproc=4))
    assert plan.feasible, plan.advice
    assert (plan.config.replicate_degree, plan.config.shard_degree) == (2, 2)
    two_hosts = plan.instance.model_copy(update={"count": 2, "gpus_per_instance": 2})
    return plan.model_copy(update={"instance": two_hosts})


def job(root: Path, plan: Plan) -> list[OptMlHost]:
    return [OptMlHost.create(root / h, plan, host=h, hosts=HOSTS) for h in HOSTS]


def finish(launches: list[Launch], timeout: float = 180) -> list[int]:
    return [launch.wait(timeout=timeout) for launch in launches]


@dataclass
class Runs:
    ref: list[OptMlHost]
    ref_rc: list[int]
    hosts: list[OptMlHost]
    killed_rc: list[int]
    killed_failure: str | None
    synced: int
    resumed_rc: list[int]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    plan = hsdp_plan()
    base = tmp_path_factory.mktemp("twohost")
    ref = job(base / "ref", plan)
    ref_rc = finish(start_hosts(ref, port=free_port()))

    hosts = job(base / "job", plan)
    first = start_hosts(hosts, port=free_port())
    first[0].wait_for(r"checkpoint step 4 saved")
    first[0].wait_for_step(6)
    first[1].kill_rank(3)  # global rank 3 = algo-2's local rank 1
    killed_rc = finish(first)
    killed_failure = hosts[1].failure()
    synced = sync_checkpoints(hosts)
    resumed_rc = finish(start_hosts(hosts, port=free_port()))
    return Runs(ref, ref_rc, hosts, killed_rc, killed_failure, synced, resumed_rc)


def test_each_launcher_derives_its_node(runs: Runs) -> None:
    for rank, host in enumerate(runs.ref):
        out = host.launches[0].output
        assert (
            f"host algo-{rank + 1}: node {rank} of 2, 2 process(es) on cpu, master 127.0.0.1" in out
        )
        rc = json.loads((host.root / "input/config/resourceconfig.json").read_text())
        assert rc["current_host"] == HOSTS[rank] and rc["hosts"] == HOSTS


def test_two_hosts_train_and_checkpoint(runs: Runs) -> None:
    assert runs.ref_rc == [0, 0]
    losses = runs.ref[0].launches[0].losses()
    assert sorted(losses) == list(range(1, 11))
    assert losses[10] < losses[1]
    # Rank 0's host holds the completion markers; algo-2 wrote its own ranks' shard files.
    assert complete_checkpoints(runs.ref[0].root) == [8, 10]
    host2_files = {p.name for p in (runs.ref[1].root / "checkpoints" / "step-00000010").rglob("*")}
    assert {"__2_0.distcp", "__3_0.distcp"} <= host2_files
    assert (runs.ref[0].root / "model" / "config.json").is_file()


def test_sigkill_on_the_second_host_fails_both_and_names_the_rank(runs: Runs) -> None:
    assert all(rc != 0 for rc in runs.killed_rc), runs.killed_rc
    assert runs.killed_failure is not None
    assert runs.killed_failure.startswith(
        "rank 3 (host algo-2, local rank 1) was killed by signal SIGKILL"
    ), runs.killed_failure


def test_two_hosts_resume_like_an_uninterrupted_run(runs: Runs) -> None:
    assert runs.synced > 0  # algo-2 got rank 0's marker and metadata, algo-1 got ranks 2-3's shards
    assert runs.resumed_rc == [0, 0]
    resumed = runs.hosts[0].launches[1]
    assert "resumed from step-00000004" in resumed.output
    ref = runs.ref[0].launches[0].losses()
    after = resumed.losses()
    assert sorted(after) == list(range(5, 11))
    assert after == {s: ref[s] for s in after}
    killed = runs.hosts[0].launches[0].losses()
    assert killed == {s: ref[s] for s in killed}  # and the first attempt was the same run
