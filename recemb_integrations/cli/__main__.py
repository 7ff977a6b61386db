"""``python -m recemb_integrations.cli``: the ``recemb`` command."""

import sys

from recemb_integrations.cli import main

if __name__ == "__main__":
    sys.exit(main())
