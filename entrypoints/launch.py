"""Container entrypoint:
`python blackwell_sm/entrypoints/launch.py --plan plan.json --opt-ml /opt/ml`.

The code bundle is unpacked to /opt/ml/code (this file is `blackwell_sm/entrypoints/launch.py`
under it). Run as a script, this folder is sys.path[0]: first the stdlib-only bootstrap
(`bootstrap.py` beside this file) checks the image against the bundle's `wheels/manifest.json`
and installs what is missing from the carried wheels (offline), before anything of ours (which
needs pydantic) is imported; then the bundle root goes first on sys.path, so the bundle's package
is the one imported, and the launcher runs.
"""

import os
import sys
from pathlib import Path

import bootstrap  # this folder is sys.path[0]: stdlib only, imports nothing of ours


def _opt_ml(argv: list[str]) -> Path:
    """The launcher's own rule: --opt-ml, else $BSM_OPT_ML, else /opt/ml."""
    for i, arg in enumerate(argv):
        if arg == "--opt-ml" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--opt-ml="):
            return Path(arg.split("=", 1)[1])
    return Path(os.environ.get("BSM_OPT_ML") or "/opt/ml")


BUNDLE_ROOT = Path(__file__).resolve().parents[2]  # <root>/blackwell_sm/entrypoints/

if __name__ == "__main__":
    bootstrap.ensure(BUNDLE_ROOT, failure=_opt_ml(sys.argv[1:]) / "output" / "failure")
    sys.path.insert(0, str(BUNDLE_ROOT))
    from blackwell_sm.launch.main import main

    sys.exit(main())
