"""`bsm init [PRESET|HF-DIR]`: a commented spec to start from (stdout, or a new file), and
`bsm presets`: the presets with their size, context and whether one instance holds them."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, info


def _complete_targets(ctx: Any, param: Any, incomplete: str) -> list[Any]:
    """Preset and template names, then folders (a Hugging Face folder holds config.json)."""
    from click.shell_completion import CompletionItem

    from blackwell_sm.cli.help import complete_presets, complete_spec_paths
    from blackwell_sm.spec.presets import PRESETS
    from blackwell_sm.spec.starter import template_names

    names = complete_presets(ctx, param, incomplete)
    names += [
        CompletionItem(n, help="template")
        for n in template_names()
        if n.startswith(incomplete) and n not in PRESETS
    ]
    folders = [c for c in complete_spec_paths(ctx, param, incomplete) if c.value.endswith("/")]
    return names + folders


@click.command("init")
@click.argument(
    "target", metavar="[PRESET|HF-DIR]", required=False, shell_complete=_complete_targets
)
@click.option(
    "--task",
    type=click.Choice(["pretrain", "finetune"]),
    help="pretrain (default) or finetune (from the model's published weights).",
)
@click.option("--out", metavar="FILE", help="Write the spec to FILE (never over an existing one).")
@OUTPUT_OPTION
def init(target: str | None, task: str | None, out: str | None, output: str) -> None:
    """Print a commented spec for PRESET (default llama-3.1-8b), a shipped template's name, or
    the model in a Hugging Face folder (HF-DIR: its config.json), ready for `bsm plan`.

    The job: section holds REPLACE-ME placeholders to fill in before `bsm submit`.
    `bsm presets` lists the presets.
    """
    from blackwell_sm.safe_load import parse_yaml
    from blackwell_sm.spec import parse_spec
    from blackwell_sm.spec.starter import starter_spec

    text, source = starter_spec(target, task)  # type: ignore[arg-type]
    parse_spec(parse_yaml(text, name=source), source=source)  # what it writes loads
    if out is not None:
        from blackwell_sm.atomic_write import write_text

        write_text(out, text, flag="--out", replace=False)
    if output == "json":
        emit_json({"source": source, "out": out, "spec": text})
    elif out is None:
        click.echo(text, nl=False)
    else:
        info(f"wrote {out} (from {source}); next: bsm plan {out}")


@click.command("presets")
@click.option(
    "--instance-type",
    default="ml.p6-b200.48xlarge",
    show_default=True,
    metavar="TYPE",
    help="Judge the fit on one instance of TYPE.",
)
@OUTPUT_OPTION
def presets(instance_type: str, output: str) -> None:
    """List the model presets: parameters, native context, and whether the planner fits each
    on one instance (at seq 4096, or the model's context when shorter)."""
    from blackwell_sm.errors import SpecError
    from blackwell_sm.hardware import get_instance
    from blackwell_sm.planner.preset_fit import preset_fits

    try:
        get_instance(instance_type)
    except SpecError as e:
        e.field = "--instance-type"
        raise
    rows = preset_fits(instance_type)
    if output == "json":
        emit_json({"instance_type": instance_type, "presets": [r.model_dump() for r in rows]})
        return
    from rich import box
    from rich.table import Table

    from blackwell_sm.cli.output import out_console, text
    from blackwell_sm.planner.units import count_text

    usable = max((r.usable_gib for r in rows), default=0.0)
    table = Table(
        title=f"presets on one {instance_type}: GiB per GPU of {usable:,.1f} usable, at seq "
        "4,096 (or the model's context)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in ("preset", "params", "context", "fits", "GiB", "precision", "AC"):
        right = col in ("params", "context", "GiB")
        table.add_column(col, justify="right" if right else "left", no_wrap=True)
    for r in rows:
        fits = ("yes", "green") if r.fits_one_instance else ("no", "bold yellow")
        table.add_row(
            r.name,
            count_text(r.n_params),
            f"{r.max_seq_len:,}",
            text(fits),
            f"{r.memory_gib:,.1f}",
            r.precision,
            r.activation_checkpointing,
        )
    out_console().print(table)
