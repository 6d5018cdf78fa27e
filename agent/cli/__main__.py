"""`python -m agent.cli ...`: the same as `jha ...`."""

import sys

from agent.cli.main import main

sys.exit(main())
