"""`python -m ict ...` is `ict ...`."""

import sys

from ict.cli import main

sys.exit(main())
