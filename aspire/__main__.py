"""`python -m aspire COMMAND ...`: the same as the `aspire` command."""

import sys

from aspire.cli import main

sys.exit(main())
