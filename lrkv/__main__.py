"""`python -m lrkv` — the same command as `lrkv`."""

import sys

from lrkv.cli import main

sys.exit(main())
