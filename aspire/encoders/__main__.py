"""`python -m aspire.encoders ...`: the same as `aspire encode ...`; the command is `aspire.cli.encode`.

Handed over by module name, so `aspire.encoders` imports nothing of the command layer.
"""

import runpy

runpy.run_module("aspire.cli.encode", run_name="__main__", alter_sys=True)
