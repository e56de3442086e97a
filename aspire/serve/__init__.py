"""A local page to pick a paper, select some of its sentences (an aspect) and see what matches.

`python -m aspire.serve --index DIR [--corpus papers.jsonl] [--port 8000]` serves the page over an
index built by `python -m aspire.index build`. The page lists a paper's sentences (with facet labels
when the corpus file gives `pred_labels`), searches by the selected ones, and shows the ranked papers
with the aligned sentences highlighted and, when ranked by OT, the transport plan as a heatmap.
A rebuilt index is picked up while the server runs; every answer names the generation it came from.

- `models`: the pydantic request models, strict JSON parsing, RequestError
- `service`: SearchService, the checked requests (JSON in, JSON out)
- `reload`: ServiceHolder, the live generation and its reloads
- `app`: the HTTP routes (FastAPI); `protocol`: uvicorn's h11 protocol with JSON errors and deadlines
- `server`: make_server, the app on uvicorn
"""

from aspire.serve.reload import ServiceHolder
from aspire.serve.requests import RequestError, SearchBody
from aspire.serve.server import AspireServer, make_server
from aspire.serve.service import SearchService, open_service, read_labels

__all__ = ["AspireServer", "RequestError", "SearchBody", "SearchService", "ServiceHolder", "make_server",
           "open_service", "read_labels"]
