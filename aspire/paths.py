"""Where things live: the shared data root and the cache root, named once.

- `DATA`: the real data sets (`../shared/data` beside the clone; see its README). Commands take it as a
  default for their `--data` options; nothing under `aspire/` spells the path again.
- `cache_root()`: `$ASPIRE_CACHE`, else `~/.cache/aspire`; models, vectors, sentence splits and exported
  graphs each keep a sub-folder of it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def cache_root() -> Path:
    """`$ASPIRE_CACHE`, else `~/.cache/aspire` (read at call time, so tests may point it elsewhere)."""
    return Path(os.environ.get("ASPIRE_CACHE") or Path.home() / ".cache" / "aspire")
