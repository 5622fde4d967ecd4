"""``python -m flinkstate``: the same as the ``flinkstate`` command."""

import sys

from flinkstate.cli import main

sys.exit(main())
