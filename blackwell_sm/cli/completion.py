"""`bsm completion bash|zsh|fish`: the shell's completion script (click's own), which also
completes preset names after --model, instance types and spec files (cli/help.py).

The script calls `bsm` back with click's protocol variables: `_BSM_COMPLETE`
(`SHELL_source` or `SHELL_complete`), `COMP_WORDS` (the line) and `COMP_CWORD` (bash and zsh:
the index of the word under the cursor; fish: that word itself). `check_protocol` holds them to
that protocol before click reads them: a malformed one is exit 2 naming the variable, never a
traceback or a silent exit 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import click

from blackwell_sm.errors import SpecError

SHELLS = ("bash", "zsh", "fish")
VAR = "_BSM_COMPLETE"
MAX_LINE = 64 << 10  # a command line, not a file: longer is not a shell asking for candidates


def _refuse(var: str, problem: str) -> SpecError:
    return SpecError(
        f"{var}: {problem}",
        field=var,
        hint="these variables are set by the script of `bsm completion SHELL`; unset them to "
        "run bsm, or source the script again",
    )


def _text(env: Mapping[str, str], var: str) -> str:
    value = env.get(var)
    if value is None:
        raise _refuse(var, f"missing ({env[VAR]} needs it)")
    if len(value) > MAX_LINE:
        raise _refuse(var, f"{len(value):,} characters (at most {MAX_LINE:,})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(var, "not UTF-8 text") from None
    return value


def check_protocol(env: Mapping[str, str]) -> None:
    """Refuse (SpecError) completion variables that do not follow click's protocol."""
    instruction = env.get(VAR)
    if instruction is None:
        return
    allowed = [f"{s}_{w}" for s in SHELLS for w in ("source", "complete")]
    if instruction not in allowed:
        raise _refuse(VAR, f"{instruction!r} is not one of {', '.join(allowed)}")
    shell, what = instruction.split("_")
    if what == "source":
        return
    from click.shell_completion import split_arg_string

    words = split_arg_string(_text(env, "COMP_WORDS"))
    cword = _text(env, "COMP_CWORD")
    if shell == "fish":
        return  # fish passes the word itself: any text
    if not re.fullmatch(r"[0-9]{1,6}", cword) or int(cword) > len(words):
        raise _refuse(
            "COMP_CWORD",
            f"{cword[:40]!r} is not the index of a word of COMP_WORDS (0-{len(words)})",
        )


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
