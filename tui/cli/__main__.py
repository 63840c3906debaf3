"""`python -m tui.cli …`: the `gpudeck` console script."""

import sys

from tui.cli import main

sys.exit(main())
