"""``python -m pipeplan`` runs the command line (through :mod:`pipeplan_entry`: Ctrl-C exits 130, one line)."""

import sys

from pipeplan_entry import main

sys.exit(main())
