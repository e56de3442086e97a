"""`python -m aspire.evaluate ...`: the same as `aspire evaluate ...`; the command is `aspire.cli.evaluate`.

Handed over by module name, so `aspire.evaluate` imports nothing of the command layer.
"""

import runpy

runpy.run_module("aspire.cli.evaluate", run_name="__main__", alter_sys=True)
