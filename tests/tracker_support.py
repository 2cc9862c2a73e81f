"""What TensorBoard's own reader loads from a run's event files (tests of train/trackers.py)."""

from __future__ import annotations

from pathlib import Path


def scalars_of(logdir: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of every scalar TensorBoard's own reader loads from `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}


def texts_of(logdir: Path) -> dict[str, list[str]]:
    """{tag: [text, ...]} of every text summary in `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    return {
        t: [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(t)]
        for t in acc.Tags()["tensors"]
    }
