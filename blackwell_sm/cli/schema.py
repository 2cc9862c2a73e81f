"""`bsm schema`: the JSON schema of the spec file, for editors and CI checks."""

from __future__ import annotations

import click

from blackwell_sm.cli.output import emit_json


@click.command()
@click.option(
    "--output",
    "-o",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="json: the JSON schema; table: every bounded field with its bounds.",
)
def schema(output: str) -> None:
    """Print the JSON schema of the spec YAML (RunSpec); `-o table` lists the bounded fields.

    Every bound and its source is also in docs/limits.md.
    """
    from blackwell_sm.spec.schema import bounded_fields, spec_json_schema

    doc = spec_json_schema()
    if output == "json":
        emit_json(doc)
        return
    from rich.table import Table

    from blackwell_sm.cli.output import out_console

    table = Table(title="bounded spec fields (sources: docs/limits.md)", title_justify="left")
    for col in ("field", "bounds", "description"):
        table.add_column(col)
    for row in bounded_fields(doc):
        bounds = ", ".join(f"{k}={v}" for k, v in row["bounds"].items())
        table.add_row(row["field"], bounds, row["description"])
    out_console().print(table)
