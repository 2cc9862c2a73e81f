"""`bsm ...` command lines as the docs and help examples write them, checked against the real
click command tree: every command and subcommand exists, every flag is one of its options.

The docs' conventions are understood: placeholders (`SPEC.yaml`, `JOB`), optional parts in
brackets (`[--dry-run]`), alternatives with `|` (`bsm status|logs|stop JOB`,
`--training-plan ARN|NAME|auto`), `...` for repetition, and shell around the command (pipes,
redirections, `$(...)`, comments).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click

from blackwell_sm.cli import cli

# where an invocation starts: `bsm` then a space, at a line/segment start or after $( ` " (
_START = re.compile(r"(?:^|(?<=[\s(`\"']))bsm\s+(?=\S)")
# where the shell (or prose) around it takes over again
_END = re.compile(r"\s+#\s|\s\|\s(?!bsm\b)|\s*[;)`]|\s&&\s|\s[<>]|\s2>")


def invocations(text: str) -> Iterator[str]:
    """Every `bsm ...` command line in a text: each alternative of `a | b` on its own."""
    text = text.replace("\\|", "|")
    for m in _START.finditer(text):
        rest = text[m.start() :].split("\n", 1)[0]
        end = _END.search(rest, 4)
        line = rest[: end.start()] if end else rest
        for part in re.split(r"\s\|\s", line):
            if part.startswith("bsm "):
                yield part.strip()


def _tokens(line: str) -> list[str]:
    out = []
    for tok in line.split()[1:]:
        tok = tok.strip("[]\"'").removesuffix("...").rstrip(",")
        if tok:
            out.append(tok)
    return out


def _option(cmd: click.Command, name: str) -> click.Parameter | None:
    for param in cmd.get_params(click.Context(cmd)):
        if name in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())):
            return param
    return None


def _check(cmd: click.Command, tokens: list[str], where: str) -> str | None:
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-") and len(tok) > 1:
            for alt in tok.split("|"):
                flag = alt.split("=", 1)[0]
                param = _option(cmd, flag)
                if param is None:
                    return f"`{where}` has no option {flag}"
            takes_value = isinstance(param, click.Option) and not (param.is_flag or param.count)
            i += 2 if takes_value and "=" not in tok else 1
            continue
        if isinstance(cmd, click.Group):
            for alt in tok.split("|"):
                sub = cmd.get_command(click.Context(cmd), alt)
                if sub is None:
                    return f"`{where}` has no subcommand {alt!r}"
                problem = _check(sub, tokens[i + 1 :], f"{where} {alt}")
                if problem:
                    return problem
            return None
        i += 1  # a positional argument or a placeholder
    return None


def check_invocation(line: str) -> str | None:
    """None when `line` (starting with `bsm`) names real commands and options, else why not."""
    return _check(cli, _tokens(line), "bsm")


def markdown_invocations(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, invocation) for each `bsm ...` in a markdown file's shell blocks, plain
    blocks and inline code; Python and YAML blocks are skipped."""
    fence = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip() or "text")
            continue
        if fence in ("python", "yaml", "json"):
            continue
        if fence is not None:
            for inv in invocations(stripped.removeprefix("$ ")):
                yield n, inv
            continue
        for span in re.findall(r"`([^`]+)`", line):
            for inv in invocations(span):
                yield n, inv
