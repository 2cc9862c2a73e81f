"""Running `bsm` in-process for the CLI tests."""

from __future__ import annotations

import contextlib
import io

from blackwell_sm.cli import main


def run(*args: str) -> tuple[int, str, str]:
    """Run `bsm` in-process through main(): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            return int(e.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()
