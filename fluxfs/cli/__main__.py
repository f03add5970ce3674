"""``python -m fluxfs.cli ARGS...``: the same as the ``fluxfs`` console script."""
import sys

from .entry import main

sys.exit(main())
