"""A local page to pick a paper, select some of its sentences (an aspect) and see what matches.

`python -m aspire.serve --index DIR [--corpus papers.jsonl] [--port 8000]` serves the page over an
index built by `python -m aspire.index build`. The page lists a paper's sentences (with facet labels
when the corpus file gives `pred_labels`), searches by the selected ones, and shows the ranked papers
with the aligned sentences highlighted and, when ranked by OT, the transport plan as a heatmap.
A rebuilt index is picked up while the server runs; every answer names the generation it came from.

- `requests`: the pydantic request models, strict JSON parsing, RequestError
- `service`: SearchService, the checked requests (JSON in, JSON out)
- `reload`: ServiceHolder, the live generation and its reloads
- `app`: the HTTP routes (FastAPI); `protocol`: uvicorn's h11 protocol with JSON errors and deadlines
- `server`: make_server, the app on uvicorn
"""

from aspire.lazy import lazy_exports

lazy_exports(__name__, {
    **dict.fromkeys(("ServiceHolder",), "aspire.serve.reload"),
    **dict.fromkeys(("RequestError", "SearchBody"), "aspire.serve.requests"),
    **dict.fromkeys(("AspireServer", "make_server"), "aspire.serve.server"),
    **dict.fromkeys(("SearchService", "open_service", "read_labels"), "aspire.serve.service"),
})

__all__ = ["AspireServer", "RequestError", "SearchBody", "SearchService", "ServiceHolder", "make_server",
           "open_service", "read_labels"]
