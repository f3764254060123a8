"""``python -m gpucluster.cli``, as the console script."""

import sys

from gpucluster.cli import main

sys.exit(main())
