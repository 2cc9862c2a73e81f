"""blackwell_sm/records: every record kind written and read back (file and log line), strict JSON
for non-finite figures, version 1 files read as documented, and each class of malformed record
refused naming the file, the line and the field (never read as 0)."""

from __future__ import annotations

import json
import math

import pytest
from records_support import CHECK_FIELDS, step_figures

from blackwell_sm.errors import SpecError
from blackwell_sm.records import (
    RECORDS_VERSION,
    SUMMARY_VERSION,
    AlertRecord,
    BadStepRecord,
    CheckRecord,
    SaveRecord,
    StartRecord,
    StopRecord,
    Summary,
    TrainRecord,
    ValRecord,
    parse_metrics,
    parse_summary,
    record_from_line,
    record_line,
    segments,
    to_json,
)

T0 = 1_764_000_000.0
TRAIN = step_figures(tok_s_gpu=1234.5, mfu=0.41, memory_kind="cuda_max_allocated_reserved")
CHECK = CHECK_FIELDS
EVERY_KIND = [
    StartRecord(step=0, world_size=16, time=T0),
    TrainRecord(step=1, time=T0 + 1, **TRAIN),
    TrainRecord(step=2, time=T0 + 2, eta_s=30.0, **TRAIN),
    ValRecord(step=2, loss=2.4, time=T0 + 3),
    BadStepRecord(step=3, loss=math.nan, grad_norm=math.inf, in_row=1, time=T0 + 4),
    CheckRecord(step=5, slowest_rank_step_time_s=1.5, **CHECK),
    AlertRecord(
        step=6, alert="memory", mem_over_gib=2.5, message="peak reserved memory above", time=T0 + 6
    ),
    SaveRecord(step=10, checkpoint="step-00000010", time=T0 + 7),
    StopRecord(step=11, reason="SIGTERM", time=T0 + 8),
    StartRecord(
        step=10, resumed_from_step=10, checkpoint="step-00000010", world_size=8, time=T0 + 9
    ),
]


def _not_strict(word: str) -> None:
    pytest.fail(f"{word}: not strict JSON")


def _jsonl(records) -> str:
    return "".join(to_json(r) + "\n" for r in records)


def _same(a, b) -> bool:
    """Records equal, NaN included."""
    da, db = a.model_dump(), b.model_dump()
    return da.keys() == db.keys() and all(
        (isinstance(x, float) and math.isnan(x) and isinstance(y, float) and math.isnan(y))
        or x == y
        for x, y in ((da[k], db[k]) for k in da)
    )


def test_every_kind_is_written_as_strict_json_and_read_back_as_it_was():
    text = _jsonl(EVERY_KIND)
    for line in text.splitlines():  # strict JSON: no NaN / Infinity tokens
        json.loads(line, parse_constant=_not_strict)
    bad = json.loads(text.splitlines()[4])
    assert bad["loss"] is None and bad["non_finite"] == {"loss": "nan", "grad_norm": "inf"}
    back = parse_metrics(text, "metrics.jsonl")
    assert len(back) == len(EVERY_KIND) and all(map(_same, back, EVERY_KIND))
    assert EVERY_KIND[0].version == RECORDS_VERSION


def test_the_log_lines_read_back_as_the_records_they_came_from():
    """What `bsm status` and a job without output read: the [bsm-*] line of each kind that has
    one (a launcher's `[default0]:` prefix allowed); other lines are None."""
    for rec in EVERY_KIND:
        line = record_line(rec)
        if rec.kind in ("start", "bad_step", "save", "stop"):
            assert line is None
            continue
        back = record_from_line("[default0]:" + line, time=getattr(rec, "time", None))
        want, got = rec.model_dump(), back.model_dump()
        if rec.kind == "train":
            want["memory_kind"] = None  # the step line does not carry it
        for key, value in want.items():
            num = isinstance(value, float)
            assert got[key] == (pytest.approx(value, rel=1e-5) if num else value), (rec.kind, key)
    assert record_from_line("[bsm] model tiny on 2 x cpu") is None
    assert "total_steps=2000000 " in record_line(EVERY_KIND[5])  # whole numbers stay whole


def test_segments_split_at_start_records_and_in_version_1_files_where_the_step_falls():
    parts = segments(EVERY_KIND)
    assert [p[0].kind for p in parts] == ["start", "start"] and len(parts[1]) == 1
    v1 = [TrainRecord(step=s, time=T0, **TRAIN) for s in (1, 2, 3, 2, 3)]
    assert [[r.step for r in p] for p in segments(v1)] == [[1, 2, 3], [2, 3]]


V1_METRICS = [
    '{"kind": "train", "step": 1, "loss": 2.0, "lr": 0.0001, "grad_norm": 1.0, "tok_s_gpu": 100.0, '
    '"mfu": 0.3, "step_time_s": 0.5, "mem_alloc_gib": 1.0, "mem_reserved_gib": 2.0, '
    '"memory_kind": "cpu_max_rss", "time": 1764000000.0}',
    '{"kind": "bad_step", "step": 2, "loss": "nan", "grad_norm": "inf", "in_row": 1, "time": 1.0}',
    '{"kind": "alert", "alert": "overrun", "step": 3, "overrun_s": 60.0, "message": "late"}',
]


def test_a_version_1_file_reads_as_documented():
    """Version 1 (before `start` records): a skipped step's figures were the strings "nan" and
    "inf" (read as those floats), alerts had no time (None)."""
    train, bad, alert = parse_metrics("\n".join(V1_METRICS) + "\n", "metrics.jsonl")
    assert train.tok_s_gpu == 100.0 and train.memory_kind == "cpu_max_rss"
    assert math.isnan(bad.loss) and bad.grad_norm == math.inf
    assert alert.time is None and alert.overrun_s == 60.0


def test_a_torn_last_line_is_left_out_and_a_torn_line_elsewhere_is_refused():
    text = _jsonl(EVERY_KIND[:2])
    assert len(parse_metrics(text + '{"kind": "train", "st', "m.jsonl")) == 2  # killed mid-write
    with pytest.raises(SpecError) as e:
        parse_metrics('{"kind": "train", "st\n' + text, "m.jsonl")
    assert "m.jsonl line 1 is not JSON" in e.value.message and e.value.field == "m.jsonl:1"


GOOD_TRAIN = json.loads(to_json(EVERY_KIND[1]))
ABSENT = object()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"tok_s_gpu": ABSENT}, "tok_s_gpu", "required field is missing"),  # absent is not 0
        ({"tok_s_gpu": None}, "tok_s_gpu", "valid number"),  # nor is null
        ({"tok_s_gpu": "1234"}, "tok_s_gpu", "valid number"),  # text
        ({"tok_s_gpu": -5.0}, "tok_s_gpu", "greater than 0"),
        ({"step_time_s": 0}, "step_time_s", "greater than 0"),
        ({"tok_s_gpu": 0}, "tok_s_gpu", "greater than 0"),  # a logged step moved tokens
        ({"loss": math.nan}, "loss", "finite number"),  # a NaN token (Python's json writes it)
        ({"loss": True}, "loss", "valid number"),
        ({"step": 2.0}, "step", "valid integer"),
        ({"memory_kind": "vram"}, "memory_kind", "cuda_max_allocated_reserved"),
        ({"surprise": 1}, "surprise", "unknown key"),
        ({"kind": "progress"}, "kind", "unknown record kind 'progress'"),
        ({"loss": None, "non_finite": {"loss": "lots"}}, "non_finite.loss", "nan, inf or -inf"),
        ({"non_finite": {"lr": "nan"}}, "non_finite.lr", "does not name a null figure"),
        ({"non_finite": ["loss"]}, "non_finite", "not a mapping"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_file_line_and_field(change, field, words):
    rec = {k: v for k, v in {**GOOD_TRAIN, **change}.items() if v is not ABSENT}
    text = _jsonl(EVERY_KIND[:1]) + json.dumps(rec) + "\n"
    with pytest.raises(SpecError) as e:
        parse_metrics(text, "run/output/data/metrics.jsonl")
    assert e.value.field == field and e.value.exit_code == 2
    assert "run/output/data/metrics.jsonl line 2" in e.value.message and words in e.value.message


def test_a_newer_format_is_refused_with_the_version():
    newer = {
        "kind": "start",
        "version": RECORDS_VERSION + 1,
        "step": 0,
        "world_size": 1,
        "time": T0,
    }
    with pytest.raises(SpecError) as e:
        parse_metrics(json.dumps(newer) + "\n", "m.jsonl")
    assert e.value.code == "newer_version" and "reads up to" in e.value.message
    assert "upgrade" in e.value.hint


def _summary(**over) -> Summary:
    base = dict(
        status="stopped (SIGTERM)",
        final_step=11,
        planned_steps=40,
        resumed_from_step=None,
        final_loss=2.4,
        final_val_loss=None,
        measured={
            "steps_timed": 3,
            "step_time_s": 0.5,
            "tokens_per_s_per_gpu": 1234.5,
            "mfu": 0.41,
            "peak_memory_allocated_gib": 10.0,
            "peak_memory_reserved_gib": 12.0,
            "memory_kind": "cuda_max_allocated_reserved",
        },
        predicted={
            "step_time_s": 0.4,
            "tokens_per_s_per_gpu": 1500.0,
            "mfu": 0.5,
            "memory_gib": 11.0,
        },
        ratio_measured_over_predicted={"tokens_per_s_per_gpu": 0.82, "peak_memory": 1.09},
        check={k: v for k, v in CHECK.items()},
        eta={
            "step": 11,
            "eta_s": 14.5,
            "projected_end_unix": T0 + 14.5,
            "deadline_unix": T0 + 5,
            "deadline": "job max runtime",
            "overrun_s": 9.5,
            "ends_before_deadline": False,
        },
        alerts=[EVERY_KIND[6].model_dump()],
    )
    return Summary.model_validate({**base, **over})


def test_the_summary_round_trips_and_version_1_reads():
    s = _summary()
    text = to_json(s, indent=2)
    json.loads(text, parse_constant=_not_strict)
    back = parse_summary(text, "summary.json")
    assert back.schema_version == SUMMARY_VERSION and not back.completed
    assert back.eta.overrun_s == 9.5 and back.check.total_steps == 2_000_000
    assert back.model_dump() == s.model_dump()
    v1 = json.loads(text)
    del v1["schema_version"]
    assert parse_summary(json.dumps(v1), "summary.json").schema_version == 1


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (
            lambda d: d["measured"].update(tokens_per_s_per_gpu=-3.0),
            "measured.tokens_per_s_per_gpu",
        ),
        (
            lambda d: d["measured"].update(tokens_per_s_per_gpu="fast"),
            "measured.tokens_per_s_per_gpu",
        ),
        (
            lambda d: d["measured"].update(tokens_per_s_per_gpu=math.nan),
            "measured.tokens_per_s_per_gpu",
        ),
        (lambda d: d["predicted"].pop("memory_gib"), "predicted.memory_gib"),
        (lambda d: d.update(status="finished"), "status"),
        (lambda d: d["alerts"][0].update(alert="disk"), "alerts.0.alert"),
        (lambda d: d.update(schema_version=SUMMARY_VERSION + 1), "schema_version"),
    ],
)
def test_a_malformed_summary_is_refused_naming_the_field(edit, field):
    d = json.loads(to_json(_summary()))
    edit(d)
    with pytest.raises(SpecError) as e:
        parse_summary(json.dumps(d), "run/output/data/summary.json")
    assert e.value.field == field and "run/output/data/summary.json" in e.value.message


@pytest.mark.parametrize("text", ["", "[1, 2]", "{", '"completed"'])
def test_a_summary_that_is_not_an_object_is_refused(text):
    with pytest.raises(SpecError, match=r"summary\.json is not"):
        parse_summary(text, "summary.json")


def test_a_metric_line_that_does_not_read_is_refused_not_zeroed():
    """A `[bsm-step]` line missing a figure, or with a word where a number belongs, is an error
    (`bsm status` turns it into a note), never a step with 0 tokens/s."""
    line = record_line(EVERY_KIND[1])
    for broken in (line.replace(" tok_s_gpu=1234.5", ""), line.replace("mfu=0.41", "mfu=high")):
        with pytest.raises(SpecError) as e:
            record_from_line(broken, time=T0)
        assert e.value.field in ("tok_s_gpu", "mfu") and "log line" in e.value.message
