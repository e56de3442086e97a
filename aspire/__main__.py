"""`python -m aspire COMMAND ...`: the same as the `aspire` command."""

import sys

from aspire.cli import main

if __name__ == "__main__":
    sys.exit(main())
