"""The toolkit's error types. Each carries the exit code the CLI uses for it.

Exit codes: 2 bad input (spec, flag, request SageMaker would reject), 3 infeasible plan,
4 AWS error, 5 refused for safety (e.g. spending money without consent), 1 anything else.
"""

from __future__ import annotations

from typing import Any


class BsmError(Exception):
    """Base class: a failure with a message a person can act on."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class SpecError(BsmError):
    """Bad input: a spec field, a CLI flag or a request field. `field` is its dotted path."""

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field


class InfeasiblePlanError(BsmError):
    """No configuration fits; `plan` holds the best candidate's full prediction."""

    exit_code = 3

    def __init__(self, message: str, *, plan: Any = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.plan = plan


class AwsError(BsmError):
    """A call to AWS failed; the message says what to do about it."""

    exit_code = 4

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.code = code


class ConsentRequiredError(BsmError):
    """An action that spends money was asked for without explicit consent."""

    exit_code = 5


class CapabilityError(BsmError):
    """The hardware or a library cannot do what the plan asks (e.g. fp8 without fp8 support)."""

    exit_code = 6
