"""`bsm run-local SPEC.yaml`: run a spec's training job on this machine through the real launcher."""

from __future__ import annotations

import json
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
    p = Path(metrics_path)
    if not p.is_file():
        return None
    for line in p.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind", "train") == "train":
            return rec.get("loss")
    return None


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


def _speed_note(summary: dict[str, Any]) -> str:
    """The in-job check's verdict on speed (its range and where the run fell), else where the
    prediction comes from."""
    c = summary.get("check") or {}
    if "pred_tok_s_gpu_low" in c and "speed" in c:
        return (f"  (range {_fmt(c['pred_tok_s_gpu_low'], '.1f')}-"
                f"{_fmt(c['pred_tok_s_gpu_high'], '.1f')}: {c['speed'].replace('_', ' ')})")  # fmt: skip
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
        why = ("training.data.source is synthetic" if data.source == "synthetic"
               else f"the spec reads {', '.join(sorted(_channels_read(spec)))}")  # fmt: skip
        raise SpecError(
            f"--channel {', '.join(unread)}: no such channel would be read ({why})",
            hint="set training.data.source: channel (and training.data.train_channel) to train "
            "on the directory, name a channel the spec reads, or drop --channel",
            field="--channel",
        )
    info(f"run-local: {spec.model.name} on {nproc} local process(es), directory {out}")
    # JSON mode: stdout carries only the result, so the training log goes to stderr.
    result = run(
        spec,
        out=out,
        nproc=nproc,
        channels=channels,
        fresh=fresh,
        stdout=sys.stderr if output == "json" else None,
    )
    if output == "json":
        emit_json(result)
        return
    s = result.summary or {}
    meas, pred = s.get("measured", {}), s.get("predicted", {})
    lines = [
        f"done: {s.get('status', '?')} at step {s.get('final_step', '?')}"
        + (f" (resumed from step {s['resumed_from_step']})" if s.get("resumed_from_step") else ""),
        f"  loss            {_fmt(_first_loss(result.metrics_path))} -> {_fmt(s.get('final_loss'))}",
        f"  tokens/s/proc   measured {_fmt(meas.get('tokens_per_s_per_gpu'), '.1f')}"
        f"  predicted {_fmt(pred.get('tokens_per_s_per_gpu'), '.1f')}" + _speed_note(s),
        f"  step time (s)   measured {_fmt(meas.get('step_time_s'), '.3f')}"
        f"  predicted {_fmt(pred.get('step_time_s'), '.3f')}",
        f"  peak memory GiB measured {_fmt(meas.get('peak_memory_reserved_gib'), '.2f')}"
        f" ({meas.get('memory_kind', '?')})  predicted {_fmt(pred.get('memory_gib'), '.2f')}",
        f"  plan            {result.plan_path}",
        f"  checkpoints     {len(result.checkpoints)} complete under {Path(result.out_dir) / 'checkpoints'}",
        f"  model           {result.model_dir} ({', '.join(result.model_files) or 'none'})",
        f"  metrics         {result.metrics_path}",
    ]
    for line in lines:
        info(line)
