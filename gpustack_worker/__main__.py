"""Runnable as ``python -m gpustack_worker``."""

import sys

from gpustack_worker.cli.main import main

sys.exit(main())
