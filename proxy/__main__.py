"""``python -m proxy`` runs the command line."""

import sys

from proxy.cli.main import main

sys.exit(main())
