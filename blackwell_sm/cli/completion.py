"""`bsm completion bash|zsh|fish`: the shell's completion script (click's own), which also
completes preset names after --model, instance types and spec files (cli/help.py)."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL; source it from your shell's start-up file.

    The script asks `bsm` itself for candidates, so it follows new commands and presets.
    """
    from click.shell_completion import get_completion_class

    from blackwell_sm.cli import cli

    cls = get_completion_class(shell)
    assert cls is not None  # click ships bash, zsh and fish
    click.echo(cls(cli, {}, "bsm", "_BSM_COMPLETE").source())
