"""Offload to host memory as a planned lever (planner/offload.py, planner/levers.py): its
arithmetic from the catalog's figures, and the advice a plan that does not fit gets."""

from __future__ import annotations

import json

import pytest
from cli_support import run

from blackwell_sm.hardware import get_instance
from blackwell_sm.planner.memory import GIB, MemoryTerms
from blackwell_sm.planner.offload import offload, offloadable
from blackwell_sm.planner.shape import shape
from blackwell_sm.spec.presets import PRESETS


def test_offload_moves_the_sharded_state_to_the_host_at_the_catalogs_bandwidths():
    inst = get_instance("ml.p6-b200.48xlarge")
    assert offloadable(inst) and inst.host_memory_gib == 2048
    m = shape(PRESETS["llama-3.1-70b"])
    p = m.n_params / 8
    mem = MemoryTerms(4 * p, 4 * p, 8 * p, 10 * GIB, 1 * GIB, 20 * GIB, 0.0, 0.0, 5 * GIB, 2 * GIB)
    o = offload(m, mem, inst, shard_degree=8, grad_accum=32)
    assert o.gpu_bytes == pytest.approx(36 * GIB)
    assert o.host_bytes_per_node == pytest.approx(16 * m.n_params)
    assert o.fits_host and o.host_limit_bytes == 0.75 * 2048 * GIB
    assert o.pcie_s == pytest.approx(32 * 12 * p / 50e9)
    assert o.cpu_step_s == pytest.approx(28 * m.n_params / 400e9)
    assert o.added_s == o.pcie_s + o.cpu_step_s
    with pytest.raises(ValueError, match="bandwidth"):
        offload(m, mem, get_instance("ml.p5.48xlarge"), shard_degree=8, grad_accum=1)


def test_70b_at_128k_fits_one_node_with_offload_and_says_why():
    """The moonshot: llama-3.1-70b at 131,072 tokens on one ml.p6-b200.48xlarge. Nothing fits
    with the state on the GPUs (178.3 GiB at best); the search takes offload, and the plan says
    why with the figures it used. Pinned off, the advice names offload and one micro-batch per
    step, each with its cost in time."""
    code, out, err = run("plan", "--model", "llama-3.1-70b", "--seq-len", "131072", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["config"]["offload"] is True and doc["memory_gib"]["params_fp32"] == 0
    assert doc["memory_gib"]["total"] <= doc["memory_gib"]["usable"]
    why = [n["text"] for n in doc["notes"] if n["code"] == "offload"]
    assert why and "without it the least memory is" in why[0] and "s more per" in why[0]
    pinned = "--model llama-3.1-70b --seq-len 131072 --set training.pins.offload=false -o json"
    code, out, err = run("plan", *pinned.split())
    assert code == 3, err
    hint = json.loads(out or err)["error"]["hint"]
    assert "offload: true fits" in hint and "CPUOffloadPolicy" in hint and "s more per" in hint
    assert "global_batch_seqs: 1" in hint and "for the same tokens instead of" in hint


def test_an_offload_pin_the_instance_cannot_size_is_bad_input_and_cpu_keeps_its_state():
    """Pinned on an instance whose catalog entry lacks the PCIe and host-memory figures: exit 2
    naming the field and why (it was 'no configuration fits'). On a CPU instance (run-local) the
    host is the device: the plan offloads, and the state stays counted in its memory."""
    args = "--model llama-3.1-8b --instance-type ml.p5.48xlarge --set training.pins.offload=true"
    code, out, err = run("plan", *args.split(), "-o", "json")
    error = json.loads(out or err)["error"]
    assert code == 2 and error["field"] == "training.pins.offload"
    assert "pcie_gb_s" in error["message"] and "allowed: false" in error["message"]
    from blackwell_sm.hardware import local_instance
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.spec import parse_spec

    cpu = local_instance(nproc=2, memory_gib=64)
    spec = {"model": "llama-3.2-1b", "training": {"seq_len": 512, "total_steps": 2}}
    plain = make_plan(parse_spec(spec), instance=cpu)
    spec["training"]["pins"] = {"offload": True}
    off = make_plan(parse_spec(spec), instance=cpu)
    assert off.feasible and off.config.offload and not plain.config.offload
    assert off.memory_gib.params_fp32 == plain.memory_gib.params_fp32 > 0


def test_an_offload_plan_traced_in_either_form_books_its_state_where_the_planner_does():
    """The GPU form puts the offloaded state on the host (outside the peak), the CPU form
    (run-local's, where the host is the device) keeps it in the peak: term by term as the
    planner's prediction in that form."""
    pytest.importorskip("torch")
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.planner.trace_check import predicted_terms
    from blackwell_sm.spec import parse_spec
    from blackwell_sm.train.trace import trace_plan

    spec = {"model": "tiny", "training": {"seq_len": 128, "total_steps": 2}}
    spec["training"]["pins"] = {"offload": True}
    p = make_plan(parse_spec(spec))
    state = ("params_fp32", "grads_fp32", "optimizer_states")
    for form in ("gpu", "cpu"):
        t = trace_plan(p, form=form, warmup=False)
        want = predicted_terms(p, "bf16", form)
        assert (t.host_bytes > 0) == (form == "gpu"), form
        assert (sum(t.terms[k] for k in state) > 0) == (form == "cpu"), form
        for k in state:
            assert t.terms[k] == pytest.approx(want[k], rel=0.05), (form, k)
