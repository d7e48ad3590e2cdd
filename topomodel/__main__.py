"""``python -m topomodel``."""

import sys

from topomodel.cli import main

sys.exit(main())
