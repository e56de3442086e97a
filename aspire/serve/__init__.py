"""A local page to pick a paper, select some of its sentences (an aspect) and see what matches.

`python -m aspire.serve --index DIR [--corpus papers.jsonl] [--port 8000]` serves the page over an
index built by `python -m aspire.index build`. The page lists a paper's sentences (with facet labels
when the corpus file gives `pred_labels`), searches by the selected ones, and shows the ranked papers
with the aligned sentences highlighted and the OT plan as a heatmap.

- `service`: SearchService, the checked requests (JSON in, JSON out), RequestError
- `server`: the HTTP routes (standard library ThreadingHTTPServer), make_server
"""

from aspire.serve.server import AspireServer, make_server
from aspire.serve.service import RequestError, SearchService, open_service, read_labels

__all__ = ["AspireServer", "make_server", "RequestError", "SearchService", "open_service", "read_labels"]
