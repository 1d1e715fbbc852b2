"""`python -m memd` is the `memd` command."""

import sys

from memd.cli import main

sys.exit(main())
