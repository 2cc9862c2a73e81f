"""The toolkit's error types. Each carries the exit code the CLI uses for it.

Exit codes: 2 bad input (spec, flag, data, request SageMaker would reject), 3 infeasible plan,
4 AWS error, 5 refused for safety (e.g. spending money without consent), 6 capability (a
missing extra too: code ``missing_extra``, naming the extra to install), 1 anything else (a bug).

Every error also has a JSON form (`to_json()`), the contract `--output json` prints on stdout:
``{"error": {"code": ..., "message": ..., "field": ..., "hint": ..., "exit_code": ...}}``.
`code` is a stable machine-readable word: the class's `kind` unless a more specific code was
given (an AWS error code such as ``AccessDenied``, for example).
"""

from __future__ import annotations

from typing import Any


class BsmError(Exception):
    """Base class: a failure with a message a person can act on."""

    exit_code = 1
    kind = "error"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        field: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.field = field
        self.code = code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"

    def to_json(self) -> dict[str, Any]:
        """The JSON error object: one contract for every command and exit code."""
        return error_object(
            code=self.code or self.kind,
            message=self.message,
            field=self.field,
            hint=self.hint,
            exit_code=self.exit_code,
        )


def error_object(
    *, code: str, message: str, field: str | None, hint: str | None, exit_code: int
) -> dict[str, Any]:
    """Build the `{"error": {...}}` object (also used for click's usage errors)."""
    return {
        "error": {
            "code": code,
            "message": message,
            "field": field,
            "hint": hint,
            "exit_code": exit_code,
        }
    }


class SpecError(BsmError):
    """Bad input: a spec field, a CLI flag or a request field. `field` is its dotted path."""

    exit_code = 2
    kind = "bad_input"


class DataError(SpecError):
    """Bad input data: a shard, a manifest or a prepared folder that is corrupt or does not
    match (exit 2, like every bad input); the message names the file."""

    kind = "bad_data"


class InfeasiblePlanError(BsmError):
    """No configuration fits; `plan` holds the best candidate's full prediction (and `trace`
    its traced step, when `bsm plan --trace` / `plan(trace=True)` ran one)."""

    exit_code = 3
    kind = "infeasible_plan"

    def __init__(
        self, message: str, *, plan: Any = None, hint: str | None = None, trace: Any = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.plan = plan
        self.trace = trace

    def to_json(self) -> dict[str, Any]:
        """The error object, plus the best candidate's whole prediction under `plan`."""
        obj = super().to_json()
        if self.plan is not None:
            obj["plan"] = (
                self.plan.model_dump(mode="json") if hasattr(self.plan, "model_dump") else self.plan
            )
        if self.trace is not None:
            obj["trace"] = (
                self.trace.model_dump(mode="json")
                if hasattr(self.trace, "model_dump")
                else self.trace
            )
        return obj


class PlanWarning(UserWarning):
    """A warning of a plan (price source, memory near the limit, a long run), raised by
    `blackwell_sm.plan()` through `warnings.warn` so a notebook shows it and a test can filter
    or turn it into an error (`warnings.simplefilter("error", PlanWarning)`)."""

    label = "warning"  # how the CLI prints it: `warning: ...`

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code  # the plan note's code (planner/notes.py NOTE_CODES): react to it


class AwsError(BsmError):
    """A call to AWS failed; the message says what to do about it."""

    exit_code = 4
    kind = "aws_error"


class ConsentRequiredError(BsmError):
    """An action that spends money was asked for without explicit consent."""

    exit_code = 5
    kind = "consent_required"


class CapabilityError(BsmError):
    """The hardware or a library cannot do what the plan asks (e.g. fp8 without fp8 support)."""

    exit_code = 6
    kind = "capability"


# The optional packages, by their import name, and the extra of pyproject.toml that installs
# each (one table: `MissingExtraError` and tests/test_missing_extra.py read it).
EXTRAS: dict[str, str] = {
    "numpy": "data",
    "tokenizers": "data",
    "transformers": "data",
    "torch": "train",
    "safetensors": "train",
    "torchao": "train",
    "sagemaker": "sdk",
    "matplotlib": "report",
    "scipy": "calibrate",
    "mlflow": "trackers",
    "wandb": "trackers",
}


class MissingExtraError(CapabilityError):
    """An optional package this command needs is not installed: the message names it and the
    hint the extra that installs it (exit 6, code ``missing_extra``; never exit 1, a bug)."""

    kind = "missing_extra"

    def __init__(self, module: str, needed_for: str, *, extra: str | None = None) -> None:
        root = module.split(".")[0]
        self.module, self.extra = root, extra or EXTRAS.get(root)
        how = f"pip install 'blackwell-sm[{self.extra}]'" if self.extra else f"pip install {root}"
        super().__init__(f"{needed_for} needs {root}, which is not installed", hint=how)


def missing_extra(e: BaseException, needed_for: str) -> MissingExtraError | None:
    """`e` as a MissingExtraError when it is the import of an optional package (`EXTRAS`)
    that failed; None for anything else (a bug stays a bug)."""
    name = getattr(e, "name", None)
    if not isinstance(e, ImportError) or not name or name.split(".")[0] not in EXTRAS:
        return None
    return MissingExtraError(name, needed_for)
