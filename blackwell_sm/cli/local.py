"""`bsm run-local SPEC.yaml`: run a spec's training job on this machine through the real launcher."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, info
from blackwell_sm.errors import SpecError


def _channels(values: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise SpecError(f"--channel expects NAME=PATH, got {v!r}", field="--channel")
        if not Path(path).is_dir():
            raise SpecError(f"--channel {name}: {path} is not a directory", field="--channel")
        out[name] = Path(path)
    return out


def _first_loss(metrics_path: str) -> float | None:
    """The first logged step's loss in metrics.jsonl (read through blackwell_sm.records)."""
    from blackwell_sm.records import TrainRecord, read_metrics

    if not Path(metrics_path).is_file():
        return None
    return next((r.loss for r in read_metrics(metrics_path) if isinstance(r, TrainRecord)), None)


def _fmt(x: Any, spec: str = ".4g") -> str:
    return "-" if x is None else format(x, spec)


def _channels_read(spec: Any) -> set[str]:
    """The channels a run of `spec` reads: its data channels, and `init` for an s3://
    training.init_from (run-local maps it to a local folder)."""
    from blackwell_sm.job.request_checks import INIT_CHANNEL

    data, init = spec.training.data, spec.training.init_from
    names = {data.train_channel, data.validation_channel} if data.source == "channel" else set()
    if init is not None and init.startswith("s3://"):
        names.add(INIT_CHANNEL)
    return {n for n in names if n}


def _speed_note(c: Any) -> str:
    """The in-job check's verdict on speed (its range and where the run fell), else (no check
    ran) where the prediction comes from."""
    if c is not None:
        low, high = _fmt(c.pred_tok_s_gpu_low, ".1f"), _fmt(c.pred_tok_s_gpu_high, ".1f")
        return f"  (range {low}-{high}: {c.speed.replace('_', ' ')})"
    return "  (from this machine's matmul rate, timed at start)"


@click.command("run-local")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="The /opt/ml-shaped run directory (default ./bsm-local-<spec name>).",
)
@click.option(
    "--nproc", type=click.IntRange(min=1), default=2, show_default=True, help="Worker processes."
)
@click.option(
    "--channel",
    "channel",
    multiple=True,
    metavar="NAME=PATH",
    help="Link a local directory as input channel NAME (e.g. train=./shards).",
)
@click.option("--fresh", is_flag=True, help="Delete earlier checkpoints, model and output first.")
@OUTPUT_OPTION
def run_local(
    spec_path: Path,
    out: Path | None,
    nproc: int,
    channel: tuple[str, ...],
    fresh: bool,
    output: str,
) -> None:
    """Plan SPEC.yaml for this machine (CPU processes, gloo) and run it with the real launcher.

    Leaves checkpoints, metrics and the exported model in --out; a second run in the same
    directory resumes from its newest complete checkpoint (use --fresh to start over).
    """
    from blackwell_sm.local import run_local as run
    from blackwell_sm.spec import load_spec

    spec = load_spec(spec_path)
    out = out or Path(f"bsm-local-{spec_path.stem}")
    channels = _channels(channel)
    unread = sorted(set(channels) - _channels_read(spec))
    if unread:
        data = spec.training.data
        why = (
            "training.data.source is synthetic"
            if data.source == "synthetic"
            else f"the spec reads {', '.join(sorted(_channels_read(spec)))}"
        )
        raise SpecError(
            f"--channel {', '.join(unread)}: no such channel would be read ({why})",
            hint="set training.data.source: channel (and training.data.train_channel) to train "
            "on the directory, name a channel the spec reads, or drop --channel",
            field="--channel",
        )
    from blackwell_sm.output_place import check_against_inputs

    init = spec.training.init_from
    reads = [*channels.values(), *([Path(init)] if init and "://" not in init else [])]
    check_against_inputs(out, reads, flag="--out")  # --fresh must never delete an input
    info(f"run-local: {spec.model.name} on {nproc} local process(es), directory {out}")
    # JSON mode: stdout carries only the result, so the training log goes to stderr.
    result = run(
        spec,
        out=out,
        nproc=nproc,
        channels=channels,
        fresh=fresh,
        stdout=sys.stderr if output == "json" else None,
        notify=lambda m: info(f"warning: {m}"),
    )
    if output == "json":
        emit_json(result)
        return
    for line in [*_summary_lines(result), *_file_lines(result)]:
        info(line)


def _summary_lines(result: Any) -> list[str]:
    """The measured-against-predicted lines of run-local's text output."""
    s = result.summary
    if s is None:
        return ["done, but the run wrote no summary.json: nothing was measured"]
    meas, pred = s.measured, s.predicted
    resumed = f" (resumed from step {s.resumed_from_step})" if s.resumed_from_step else ""
    return [
        f"done: {s.status} at step {s.final_step}{resumed}",
        f"  loss            {_fmt(_first_loss(result.metrics_path))} -> {_fmt(s.final_loss)}",
        f"  tokens/s/proc   measured {_fmt(meas.tokens_per_s_per_gpu, '.1f')}"
        f"  predicted {_fmt(pred.tokens_per_s_per_gpu, '.1f')}" + _speed_note(s.check),
        f"  step time (s)   measured {_fmt(meas.step_time_s, '.3f')}"
        f"  predicted {_fmt(pred.step_time_s, '.3f')}",
        f"  peak memory GiB measured {_fmt(meas.peak_memory_reserved_gib, '.2f')}"
        f" ({meas.memory_kind or '?'})  predicted {_fmt(pred.memory_gib, '.2f')}",
    ]


def _file_lines(result: Any) -> list[str]:
    return [
        f"  plan            {result.plan_path}",
        f"  checkpoints     {len(result.checkpoints)} complete under {Path(result.out_dir) / 'checkpoints'}",
        f"  model           {result.model_dir} ({', '.join(result.model_files) or 'none'})",
        f"  metrics         {result.metrics_path}",
    ]
