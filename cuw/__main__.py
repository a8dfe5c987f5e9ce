"""``python -m cuw``: the command line (:mod:`cuw.cli.main`)."""

import sys

from cuw.cli.main import main

sys.exit(main())
