"""Choose among CSFCube runs by the two-fold protocol: `aspire.evaluate.two_fold` (its docstring
says how), kept here as a script.

    python experiments/select_two_fold.py --candidate 'runs/csfcube/sweep-abstract-*/w*' --candidate runs/csfcube/X
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aspire.evaluate.two_fold import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
