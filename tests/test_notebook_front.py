"""The notebook front door (issue 37 item 12): the API's names visible to `dir()` and
completion before anything loads, `plan()` keywords for `bsm plan`'s flags, did-you-mean for
presets and keywords as the CLI has."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from cli_support import REPO

import blackwell_sm as bsm
from blackwell_sm.api.spec_input import FLAGS
from blackwell_sm.errors import SpecError


def test_dir_lists_the_api_before_anything_is_imported() -> None:
    """In a fresh interpreter `dir(blackwell_sm)` (what completion reads) lists the lazy API
    without importing it, and none of the module's own imports."""
    code = (
        "import sys, blackwell_sm as b\n"
        "names = dir(b)\n"
        "print(' '.join(names))\n"
        "print('blackwell_sm.api.plan' in sys.modules, 'pydantic' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    names, loaded = r.stdout.splitlines()
    want = {"plan", "traced_plan", "trace_plan", "job_count", "status_sentence", "load_spec"}
    want |= {"submit", "Plan", "TracedPlan", "InfeasiblePlanError", "PlanWarning"}
    assert want <= set(names.split())
    assert not {"importlib", "Any", "TYPE_CHECKING", "annotations"} & set(names.split())
    assert loaded == "False False"


def test_a_near_miss_attribute_says_did_you_mean() -> None:
    with pytest.raises(AttributeError, match="did you mean 'plan'"):
        bsm.plam  # noqa: B018


def test_plan_takes_the_clis_flags_as_keywords() -> None:
    """Every `bsm plan` flag that sets the spec is a `plan()` keyword, and sets the same field."""
    import inspect

    params = inspect.signature(bsm.plan).parameters
    assert {f.keyword for f in FLAGS} - {"model"} <= set(params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = bsm.plan(
            "llama-3.1-8b",
            seq_len=8192,
            total_tokens=2e9,
            global_batch_tokens=1_048_576,
            instance_count=2,
            instance_type="ml.p6-b200.48xlarge",
            optimize="cost",
        )
    assert isinstance(p, bsm.Plan)
    assert p.config.seq_len == 8192 and p.instance.count == 2 and p.objective == "cost"
    assert p.config.global_batch_sequences * 8192 == 1_048_576
    assert abs(p.run.tokens - 2e9) / 2e9 < 0.01


def test_a_keyword_and_an_override_of_one_field_are_refused() -> None:
    with pytest.raises(SpecError, match=r"both set training\.seq_len") as e:
        bsm.plan("tiny", seq_len=128, **{"training.seq_len": 256})
    assert e.value.exit_code == 2


@pytest.mark.parametrize(
    ("call", "hint"),
    [
        (lambda: bsm.plan("llama-3.1-8bb"), "did you mean 'llama-3.1-8b'?"),
        (lambda: bsm.plan("tiny", seqlen=128), "did you mean 'seq_len'?"),
        (lambda: bsm.plan("tiny", total_token=10**6), "did you mean 'total_tokens'?"),
        (lambda: bsm.plan("tiny", micro_batch=2), "did you mean 'micro_batch_size'?"),
    ],
    ids=["preset", "seq_len", "total_tokens", "pin"],
)
def test_near_misses_get_did_you_mean(call, hint: str) -> None:
    with pytest.raises(SpecError) as e:
        call()
    assert e.value.exit_code == 2 and hint in str(e.value)
