import sys

from cuw.cli.main import main

sys.exit(main())
