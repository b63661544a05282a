"""Entry point for `python -m guard`."""

import sys

from guard.cli import main

sys.exit(main())
