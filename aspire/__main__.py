"""`python -m aspire COMMAND ...`: the same as the `aspire` command."""

from aspire.cli import console

if __name__ == "__main__":
    console()
