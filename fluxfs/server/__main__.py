"""``python -m fluxfs.server``: serve until SIGINT/SIGTERM, URL on the first stdout line."""
import sys

from .cli import main

sys.exit(main())
