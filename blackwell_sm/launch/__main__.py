"""`python -m blackwell_sm.launch`: the container's launcher."""

import sys

from blackwell_sm.launch.main import main

sys.exit(main())
