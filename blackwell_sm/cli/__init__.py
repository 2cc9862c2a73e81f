"""`bsm`: a group of thin commands, each loaded only when it runs so `bsm --help` stays instant."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
import warnings
from typing import Any

import click

from blackwell_sm.cli import help as _help
from blackwell_sm.errors import BsmError, missing_extra

# command name -> "module:attribute" of its click command. Each module owns one area.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("blackwell_sm.cli.init:init", "Write a commented spec for a preset or a HF folder."),
    "presets": (
        "blackwell_sm.cli.init:presets",
        "List model presets: size, context, fit on one node.",
    ),
    "plan": ("blackwell_sm.cli.plan:plan", "Choose and explain a training configuration."),
    "schema": ("blackwell_sm.cli.schema:schema", "Print the JSON schema of the spec file."),
    "submit": ("blackwell_sm.cli.submit:submit", "Submit a spec as a SageMaker training job."),
    "status": ("blackwell_sm.cli.jobs:status", "Show a training job's status."),
    "logs": ("blackwell_sm.cli.jobs:logs", "Print (or follow) a training job's logs."),
    "stop": ("blackwell_sm.cli.jobs:stop", "Stop a training job."),
    "list": ("blackwell_sm.cli.jobs:list_jobs", "List this toolkit's training jobs."),
    "plans": (
        "blackwell_sm.cli.training_plans:plans",
        "Search, reserve and inspect training plans.",
    ),
    "iam-policy": ("blackwell_sm.cli.iam:iam_policy", "Print the least-privilege IAM policies."),
    "run-local": ("blackwell_sm.cli.local:run_local", "Run a spec's training job on this machine."),
    "data": ("blackwell_sm.cli.data:data", "Prepare token shards from text or JSONL."),
    "calibrate": (
        "blackwell_sm.cli.calibrate:calibrate",
        "Fit the planner's constants to measured runs; write a calibration profile.",
    ),
    "report": ("blackwell_sm.cli.report:report", "Write an HTML report of a run: plots and table."),
    "completion": (
        "blackwell_sm.cli.completion:completion",
        "Print the shell completion script (bash, zsh, fish).",
    ),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return self.commands.get(name)
        target, _ = COMMANDS[name]
        module, attr = target.split(":")
        try:
            cmd = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise click.ClickException(f"command {name!r} is not available: {e}") from e
        return _help.decorate(cmd, name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with a did-you-mean for an unknown command."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            from blackwell_sm.spec.suggest import did_you_mean

            hint = did_you_mean(name, COMMANDS)
            ctx.fail(
                f"No such command {name!r}." + (f" {hint[0].upper()}{hint[1:]}" if hint else "")
            )
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="blackwell-sm", prog_name="bsm")
def cli() -> None:
    """blackwell_sm: plan, submit and run FSDP2 training jobs on SageMaker ml.p6-b200.48xlarge.

    Exit codes: 0 ok, 1 anything else (an internal error: code "internal"), 2 bad input,
    3 infeasible plan, 4 AWS error, 5 consent needed, 6 capability, 130 Ctrl-C.
    With --output json every failure is one {"error": {...}} object on stdout.
    """


cli.epilog = _help.epilog("")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the group and map toolkit errors to exit codes.

    The human message always goes to stderr, printed literally. With `--output json`, every
    failure also prints one error object on stdout (see `blackwell_sm.errors`); an exception
    nobody expected is a bug, reported as code `internal` (exit 1) with its traceback on stderr.
    """
    # bsm uses no pydantic plugins: skip pydantic's scan of every installed package's entry
    # points at the first model class (~10-15 ms CPU of each command). A user's setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    args = list(sys.argv[1:] if argv is None else argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            if "_BSM_COMPLETE" in os.environ:  # the completion protocol, checked first
                from blackwell_sm.cli.completion import check_protocol

                check_protocol(os.environ)
            rv = cli.main(args=args, prog_name="bsm", standalone_mode=False)
        except BrokenPipeError:  # `bsm list | head`: the reader left; nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except (Exception, KeyboardInterrupt) as e:  # every failure ends as one error object
            _fail(args, e)
    sys.exit(rv if isinstance(rv, int) else 0)


def _show_warning(message: Any, category: type[Warning], *args: Any, **kw: Any) -> None:
    """The toolkit's own warning categories print as `note: ...` / `warning: ...` lines on
    stderr (literally); others as Python prints them."""
    if category.__module__.startswith("blackwell_sm."):
        from blackwell_sm.cli.output import say

        say(f"{getattr(category, 'label', 'warning')}: {message}")
    else:
        _PY_SHOWWARNING(message, category, *args, **kw)


_PY_SHOWWARNING = warnings.showwarning


def _command(args: list[str]) -> str:
    """`bsm data prepare` for `args`: the command words, without arguments or options."""
    words, group = ["bsm"], cli
    for arg in args:
        if not isinstance(group, click.Group):
            break
        with contextlib.suppress(Exception):  # a lazy command that fails to load: stop here
            group = group.get_command(click.Context(group), arg)  # type: ignore[assignment]
            if group is not None:
                words.append(arg)
                continue
        break
    return "`" + " ".join(words) + "`"


def _fail(args: list[str], e: BaseException) -> None:
    """Print the failure for people (stderr) and, under `--output json`, as one object on
    stdout; exit with its code."""
    from blackwell_sm.cli.output import emit_json, err_console, text, wants_json
    from blackwell_sm.errors import error_object

    def obj(code: str, message: str, exit_code: int, field: str | None = None) -> dict:
        return error_object(code=code, message=message, field=field, hint=None, exit_code=exit_code)

    extra = missing_extra(e, _command(args))  # an optional package not installed: no bug
    if extra is not None:
        e = extra
    if isinstance(e, click.exceptions.Abort):
        out, human, exit_code = obj("aborted", "Aborted.", 130), "Aborted.", 130
    elif isinstance(e, click.ClickException):
        if not wants_json(args):
            e.show()
            sys.exit(e.exit_code)
        param = getattr(e, "param", None)
        field = f"--{param.name.replace('_', '-')}" if param is not None and param.name else None
        human, exit_code = e.format_message(), e.exit_code
        out = obj("usage", human, exit_code, field)
    elif isinstance(e, BsmError):
        out, human, exit_code = e.to_json(), str(e), e.exit_code
    elif isinstance(e, KeyboardInterrupt):
        out, human, exit_code = obj("interrupted", "Interrupted.", 130), "Interrupted.", 130
    else:
        traceback.print_exc(file=sys.stderr)
        human = f"internal error: {type(e).__name__}: {e}"
        out = obj("internal", f"{type(e).__name__}: {e}", 1)
        out["error"]["hint"] = (
            "this is a bug in bsm, not in your input: the traceback is on stderr; please report "
            "it with the command line"
        )
        human += f"\n  hint: {out['error']['hint']}"
        exit_code = 1
    err_console().print(text(("error: ", "bold red"), human))
    if wants_json(args):
        emit_json(out)
    sys.exit(exit_code)
