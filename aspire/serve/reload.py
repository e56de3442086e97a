"""The live SearchService over an index directory, swapped for a new one when the index is rebuilt.

An index directory names its live generation in `CURRENT` (aspire.index.store). `ServiceHolder`
serves one generation at a time and reports its name (e.g. "gen-000003") in every answer, with its manifest's
digest in a header (`aspire.serve.app`: a rebuild can reuse the name). A rebuild is picked up in two ways:

- on a check: `get()` (called once per request) compares `CURRENT`'s file status with the one seen
  at the last load (one `stat`, at most every `check_every` seconds); when it changed, a background
  thread opens the new generation while requests go on being answered from the old one;
- on demand: `reload()` (the `POST /api/reload` route) opens it at once and says what it did.

The swap is one assignment: a request holds the service it started with to its end, so no request
is dropped or sees two generations. An old generation's files may be deleted by the build that
replaced it; the old service still answers from its open files until its last request ends. A new
generation that cannot be opened (a build still writing, a broken index) leaves the old one
served: the reason is logged as a warning, reported in `reload_error`, and tried again after
`retry_after` seconds.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from aspire.index.disk import IndexFormatError
from aspire.serve.service import SearchService, generation_key, open_service

log = logging.getLogger(__name__)

OPEN_ATTEMPTS = 3
T = TypeVar("T")


class ServiceHolder:
    """Holds the SearchService of an index directory's live generation and reloads it on change.

    Args:
        index_dir, overrides, labels_from, cross_encoder: as for `open_service` (the one cross-encoder model
            serves every generation); index_dir None: serve `service` only.
        check_every: seconds between two checks of `CURRENT` by `get()`; None: only `reload()` reloads.
        retry_after: seconds before a generation that failed to open is tried again by a check.
        service: a service already opened (of `index_dir`'s live generation, or of no directory).
    Opening the first generation raises what `open_service` raises (a missing or broken index); `check_every` (when
    given) and `retry_after` are finite numbers >= 0 (ValueError naming them, before anything is opened).
    """

    def __init__(self, index_dir: str | Path | None, overrides: Sequence[str] = (),
                 labels_from: str | Path | None = None, check_every: float | None = 0.0, retry_after: float = 5.0,
                 service: SearchService | None = None, cross_encoder=None) -> None:
        if index_dir is None and service is None:
            raise ValueError("ServiceHolder needs an index directory or a service")
        for name, value in (("check_every", check_every), ("retry_after", retry_after)):
            # once taken as given: NaN made every later check compare False (no reload ever again), a negative or
            # infinite value read as "every request" or "never" unsaid
            if (value is not None or name == "retry_after") and (
                    isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        self.index_dir = Path(index_dir) if index_dir is not None else None
        self.overrides = list(overrides)
        self.labels_from = labels_from
        self.cross_encoder = cross_encoder
        self.check_every = check_every
        self.retry_after = retry_after
        self.reload_error: str | None = None
        self._lock = threading.Lock()  # one load at a time
        self._next_check = 0.0
        self._stamp = self._current_stamp()
        self._service = service if service is not None else self._open()

    @property
    def service(self) -> SearchService:
        """The service answering now (no check)."""
        return self._service

    def get(self) -> SearchService:
        """The service for a new request; starts a background reload when `CURRENT` changed."""
        if self.check_every is not None and self.index_dir is not None:
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + self.check_every
                if self._current_stamp() != self._stamp and self._lock.acquire(blocking=False):
                    threading.Thread(target=self._reload_locked, name="aspire-reload", daemon=True).start()
        return self._service

    def reload(self) -> dict:
        """Open the live generation now when it is not the one served: {"generation", "previous",
        "reloaded", "error"} (error: why the live generation could not be opened, None when it was)."""
        return self.reload_service()[0]

    def reload_service(self) -> tuple[dict, SearchService]:
        """`reload()`, and the service served when it ended (the one its `generation` names: a later reload
        may have swapped it since)."""
        if self.index_dir is None:
            gen = self._service.generation
            return {"generation": gen, "previous": gen, "reloaded": False, "error": None}, self._service
        self._lock.acquire()
        return self._reload_locked()

    def _reload_locked(self) -> tuple[dict, SearchService]:
        previous, served = self._service.generation, self._service
        try:
            stamp = self._current_stamp()
            if self._read_live(lambda: generation_key(self.index_dir)) != served.key:  # new, or rebuilt with its name
                self._service = self._open()
                log.info("index %s: now serving %s (was %s)", self.index_dir, self._service.generation, previous)
            self._stamp, self.reload_error = stamp, None
        except Exception as exc:  # noqa: BLE001 - a broken or half-written index: keep serving the old one, say why
            self.reload_error = f"{type(exc).__name__}: {exc}"
            self._next_check = time.monotonic() + self.retry_after
            log.warning("index %s: could not open its live generation (still serving %s): %s",
                        self.index_dir, previous, self.reload_error)
        finally:
            now, error = self._service, self.reload_error  # read under the lock: what this reload ended with
            self._lock.release()
        return {"generation": now.generation, "previous": previous, "reloaded": now is not served,
                "error": error}, now

    def _current_stamp(self) -> tuple | None:
        """(inode, mtime, size) of `CURRENT`: a rebuild replaces the file, so any change shows here."""
        if self.index_dir is None:
            return None
        try:
            st = os.stat(self.index_dir / "CURRENT")
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _open(self) -> SearchService:
        """The live generation opened, read again when a build replaced it while it was being read."""
        for _ in range(OPEN_ATTEMPTS):
            service = self._read_live(lambda: open_service(self.index_dir, self.overrides, self.labels_from,
                                                           self.cross_encoder))
            if self._read_live(lambda: generation_key(self.index_dir)) == service.key:  # CURRENT did not move meanwhile
                return service
        raise RuntimeError(f"{self.index_dir}: the live generation changed {OPEN_ATTEMPTS} times while it was read")

    def _read_live(self, read: Callable[[], T]) -> T:
        """`read()` of the live generation, again when a build replaced it meanwhile: its files gone midway raise
        FileNotFoundError, or IndexFormatError from the manifest's checks, and `CURRENT` moved. An error while
        `CURRENT` stayed (a missing or broken file) is raised."""
        for _ in range(OPEN_ATTEMPTS - 1):
            stamp = self._current_stamp()
            try:
                return read()
            except (FileNotFoundError, IndexFormatError):
                if self._current_stamp() == stamp:
                    raise
        return read()  # the last try: what it raises is the answer
