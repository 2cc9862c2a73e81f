"""The names users' dashboards depend on: every scalar and text tag the trackers write, read
back by TensorBoard's own reader, against the table in docs/trackers.md ("What is reported").
Renaming a tag (or the table) fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from records_support import CHECK_FIELDS, STEP_FIGURES
from tracker_support import scalars_of, texts_of
from train_support import local_plan

from blackwell_sm import records as R
from blackwell_sm.records.kinds import CheckFigures

DOC = Path(__file__).resolve().parents[1] / "docs" / "trackers.md"
T = 1.0e9


def doc_table() -> dict[str, tuple[set[str], set[str]]]:
    """{record: (scalar names, text tags)} of the table, each name as written in backticks
    (the record's words before any parenthesis)."""
    text = DOC.read_text()
    start = text.index("| record | scalars | text / tags |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        record, scalars, tags = (c.strip() for c in line.strip("|").split("|"))
        tag_names = set(re.findall(r"`([^`]+)`", tags.split(":")[0]))
        rows[record.split(" (")[0]] = (set(re.findall(r"`([^`]+)`", scalars)), tag_names)
    return rows


CHECK = R.CheckRecord(step=4, **CHECK_FIELDS)
RECORDS: dict[str, list[Any]] = {
    "train": [R.TrainRecord(step=1, time=T, eta_s=30.0, **STEP_FIGURES)],
    "val": [R.ValRecord(step=2, loss=2.5, time=T)],
    "check": [CHECK],
    "alert": [
        R.AlertRecord(step=5, alert="overrun", overrun_s=60.0, message="late", time=T),
        R.AlertRecord(step=6, alert="memory", mem_over_gib=2.0, message="big", time=T),
    ],
    "save, stop, start, bad_step": [
        R.SaveRecord(step=4, checkpoint="step-00000004", time=T),
        R.StopRecord(step=7, reason="sigterm", time=T),
        R.StartRecord(step=0, world_size=1, time=T),
        R.BadStepRecord(step=3, loss=float("nan"), grad_norm=1.0, in_row=1, time=T),
    ],
}


def _written(tmp: Path, records: list) -> tuple[set[str], set[str]]:
    """(scalar tags, text tags) a TensorBoard tracker writes for `records` alone."""
    from blackwell_sm.train.trackers import TensorBoardTracker

    tracker = TensorBoardTracker(local_plan(), tmp)
    for rec in records:
        tracker.record(rec)
    tracker.writer.close()
    return set(scalars_of(tmp)), set(texts_of(tmp)) - {"plan"}


def test_every_tag_the_trackers_write_is_the_docs_table(tmp_path):
    table = doc_table()
    assert set(table) == {*RECORDS, "the plan"}
    check_figures = {
        f"check/{k}" for k, f in CheckFigures.model_fields.items() if f.annotation is not str
    }
    for record, records in RECORDS.items():
        scalars, texts = _written(tmp_path / record.replace(", ", "-"), records)
        want_scalars, want_texts = table[record]
        if record == "train":  # the first train record carries the plan's scalars too
            scalars -= table["the plan"][0]
        if record == "check":  # `check/<figure>`, then some figures as examples
            assert {f"check/{n}" for n in want_scalars - {"check/<figure>"}} <= scalars
            assert "check/<figure>" in want_scalars
            assert {s.removeprefix("check/") for s in scalars} <= set(CheckFigures.model_fields)
            assert len(scalars) >= 15 and scalars <= check_figures | {"check/total_steps"}
        else:
            assert scalars == want_scalars, record
        if record == "alert":  # `alert/<kind>`: one tag per kind
            assert texts == {"alert/overrun", "alert/memory"} and want_texts == {"alert/<kind>"}
        else:
            assert texts == want_texts, record


def test_the_plan_is_reported_under_the_docs_names(tmp_path):
    from blackwell_sm.train.trackers import TensorBoardTracker

    want_scalars, want_texts = doc_table()["the plan"]
    TensorBoardTracker(local_plan(), tmp_path).writer.close()
    assert set(texts_of(tmp_path)) == want_texts == {"plan"}
    scalars, _ = _written(tmp_path / "first", RECORDS["train"])
    assert scalars - doc_table()["train"][0] == want_scalars
