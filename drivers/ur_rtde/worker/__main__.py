"""`python -m drivers.ur_rtde.worker --fd N`: the UR driver's worker process (server.py)."""

import sys

from drivers.ur_rtde.worker.server import main

sys.exit(main())
