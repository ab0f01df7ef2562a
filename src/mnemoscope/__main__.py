"""``python -m mnemoscope`` = the ``mnemoscope`` command."""

import sys

from mnemoscope.cli.main import main

sys.exit(main())
