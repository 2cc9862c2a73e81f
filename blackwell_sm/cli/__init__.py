"""`bsm`: a group of thin commands, each loaded only when it runs so `bsm --help` stays instant."""

from __future__ import annotations

import importlib
import os
import sys

import click

from blackwell_sm.errors import BsmError

# command name -> "module:attribute" of its click command. Each module owns one area.
COMMANDS: dict[str, tuple[str, str]] = {
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
}


def _internal_error(e: Exception) -> tuple[dict, str]:
    """(error object, message) for an exception no command turned into a BsmError: a bug in
    bsm. BSM_DEBUG=1 prints its traceback on stderr as well."""
    from blackwell_sm.errors import error_object

    if os.environ.get("BSM_DEBUG"):
        import traceback

        traceback.print_exc()
    first = (str(e).strip().splitlines() or [""])[0][:300]
    message = f"internal error: {type(e).__name__}: {first}"
    hint = "this is a bug in bsm: please report it with the command line (BSM_DEBUG=1 shows where)"
    obj = error_object(code="internal_error", message=message, field=None, hint=hint, exit_code=1)
    return obj, f"{message}\n  hint: {hint}"


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
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise click.ClickException(f"command {name!r} is not available: {e}") from e

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="blackwell-sm", prog_name="bsm")
def cli() -> None:
    """blackwell_sm: plan, submit and run FSDP2 training jobs on SageMaker ml.p6-b200.48xlarge.

    Exit codes: 0 ok, 2 bad input, 3 infeasible plan, 4 AWS error, 5 consent needed, 130 Ctrl-C.
    """


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the group and map toolkit errors to exit codes.

    The human message always goes to stderr, printed literally. With `--output json`, every
    failure also prints one error object on stdout (see `blackwell_sm.errors`).
    """
    # bsm uses no pydantic plugins: skip pydantic's scan of every installed package's entry
    # points at the first model class (~10-15 ms CPU of each command). A user's setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from blackwell_sm.cli.output import err_console, text, wants_json
    from blackwell_sm.errors import error_object

    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)

    def fail(obj: dict, human: str, exit_code: int) -> None:
        err_console().print(text(("error: ", "bold red"), human))
        if as_json:
            from blackwell_sm.cli.output import emit_json

            emit_json(obj)
        sys.exit(exit_code)

    try:
        rv = cli.main(args=args, prog_name="bsm", standalone_mode=False)
    except click.exceptions.Abort:
        fail(
            error_object(code="aborted", message="Aborted.", field=None, hint=None, exit_code=130),
            "Aborted.",
            130,
        )
    except click.ClickException as e:
        if not as_json:
            e.show()
            sys.exit(e.exit_code)
        param = getattr(e, "param", None)
        field = f"--{param.name.replace('_', '-')}" if param is not None and param.name else None
        fail(
            error_object(
                code="usage", message=e.format_message(), field=field, hint=None,
                exit_code=e.exit_code,
            ),
            e.format_message(),
            e.exit_code,
        )  # fmt: skip
    except BsmError as e:
        fail(e.to_json(), str(e), e.exit_code)
    except KeyboardInterrupt:
        fail(
            error_object(
                code="interrupted", message="Interrupted.", field=None, hint=None, exit_code=130
            ),
            "Interrupted.",
            130,
        )
    except Exception as e:  # a bug: still one error object, never a traceback (unless asked)
        fail(*_internal_error(e), 1)
    sys.exit(rv if isinstance(rv, int) else 0)
