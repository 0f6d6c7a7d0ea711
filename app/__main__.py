"""``python -m app``: the ``specchat`` command."""

import sys

from app.main import main

sys.exit(main())
