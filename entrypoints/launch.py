"""Container entrypoint: `python entrypoints/launch.py --plan plan.json --opt-ml /opt/ml`.

The code bundle is unpacked to /opt/ml/code with `blackwell_sm/` beside this directory; put that
root first on sys.path so the bundle's package is the one imported, then run the launcher.
"""

import sys
from pathlib import Path

BUNDLE_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BUNDLE_ROOT))

from blackwell_sm.launch.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
