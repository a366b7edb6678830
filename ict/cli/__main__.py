"""`python -m ict.cli ...` = the `ict` command."""

import sys

from ict.cli import main

sys.exit(main())
