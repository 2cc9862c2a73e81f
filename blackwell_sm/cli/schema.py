"""`bsm schema`: the JSON schema of the spec file, for editors and CI checks."""

from __future__ import annotations

import click

from blackwell_sm.cli.output import emit_json


@click.command()
def schema() -> None:
    """Print the JSON schema of the spec YAML (RunSpec)."""
    from blackwell_sm.spec import RunSpec

    emit_json(RunSpec.model_json_schema())
