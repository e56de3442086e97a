"""`python -m aspire.data STAGE ...`: the same as `aspire data STAGE ...`; the command is `aspire.cli.data`.

Handed over by module name, so `aspire.data` (a low layer) imports nothing of the command layer.
"""

import runpy

runpy.run_module("aspire.cli.data", run_name="__main__", alter_sys=True)
