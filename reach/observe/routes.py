"""The observer's HTTP surface, mounted by the gateway under ``/observe``.

========================================  ==================================================
``GET /observe``                          the page (public: it holds no data)
``GET /observe/static/{name}``            its script and style sheet (public; shipped in the
                                          package, nothing from elsewhere)
``GET /observe/api/stream``               server-sent events: a ``snapshot`` each second (every
                                          part first, then the parts that changed, and the
                                          restarts since the last one)
``GET /observe/api/snapshot``             the last look, every part
``GET /observe/api/agents``               a page of agents: ``capability``, ``q`` (words of
                                          the ID or description), ``status``, ``page``,
                                          ``size``
``GET /observe/api/traces``               recent traces (``slowest=1``: the slowest), by
                                          ``agent``, ``capability``, ``status=error``
``GET /observe/api/traces/{trace_id}``    one trace as a waterfall
``GET /observe/api/letters``              the most recent dead letters
========================================  ==================================================

Every ``/observe/api`` call needs the gateway's bearer token in ``Authorization`` (the gateway
checks it before any of these runs). The page keeps the token in the tab's session storage and
sends it only in that header, the stream included (it reads the stream with ``fetch``, not
``EventSource``, which cannot send headers): a token never travels in a URL, so it is never in
an access log, the browser's history or a ``Referer``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from reach.observe.sampler import Sampler
from reach.observe.snapshot import Json, sse
from reach.observe.traces_view import waterfall
from reach.observe.views import MAX_PAGE, agents_page, rates_of
from reach.records import AgentStatus
from reach.spans import SpanStatus

#: Where the observer is mounted.
PREFIX = "/observe"
#: The shipped page and its assets.
STATIC = Path(__file__).parent / "static"
#: The most traces a listing gives.
MAX_TRACES = 200

_TRACE_ID = re.compile(r"[0-9a-f]{32}\Z")
#: The page's own rules for the browser: nothing but this origin's script, style and calls.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}


def is_public(method: str, path: str) -> bool:
    """Whether a request is for the page or its assets (no token needed: they hold no data)."""
    if method not in ("GET", "HEAD"):
        return False
    return path in (PREFIX, f"{PREFIX}/") or path.startswith(f"{PREFIX}/static/")


def is_observer_api(path: str) -> bool:
    """Whether a request is for the observer's data (only observers' tokens may read it)."""
    return path == f"{PREFIX}/api" or path.startswith(f"{PREFIX}/api/")


def _shipped() -> dict[str, Path]:
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in _TYPES}


def _bad(message: str) -> JSONResponse:
    return JSONResponse({"error": "bad_request", "message": message}, status_code=400)


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number, got {raw!r}")
    return max(low, min(int(raw), high))


class ObserverRoutes:
    """The routes of one gateway replica's observer (see the module's docstring).

    Args:
        sampler: The replica's looks at the cluster.
    """

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self._files = _shipped()

    def routes(self) -> list[BaseRoute]:
        """The Starlette routes, to mount in the gateway's application."""
        return [
            Route(PREFIX, self._page, methods=["GET"]),
            Route(f"{PREFIX}/", self._page, methods=["GET"]),
            Route(f"{PREFIX}/static/{{name}}", self._static, methods=["GET"]),
            Route(f"{PREFIX}/api/stream", self._stream, methods=["GET"]),
            Route(f"{PREFIX}/api/snapshot", self._snapshot, methods=["GET"]),
            Route(f"{PREFIX}/api/agents", self._agents, methods=["GET"]),
            Route(f"{PREFIX}/api/traces", self._traces, methods=["GET"]),
            Route(f"{PREFIX}/api/traces/{{trace_id}}", self._trace, methods=["GET"]),
            Route(f"{PREFIX}/api/letters", self._letters, methods=["GET"]),
        ]

    async def _page(self, _request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type=_TYPES[".html"], headers=_HEADERS)

    async def _static(self, request: Request) -> Response:
        path = self._files.get(request.path_params["name"])
        if path is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return FileResponse(path, media_type=_TYPES[path.suffix], headers=_HEADERS)

    async def _stream(self, _request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            async for message in self.sampler.watch():
                yield sse(message, event_id=int(message["seq"]))

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    async def _snapshot(self, _request: Request) -> Response:
        snapshot = await self.sampler.latest()
        body: Json = {"seq": snapshot.seq, "at": snapshot.at, **snapshot.parts}
        return JSONResponse(body)

    async def _agents(self, request: Request) -> Response:
        query = request.query_params
        try:
            page = _int(request, "page", 0, 0, 1_000_000)
            size = _int(request, "size", 50, 1, MAX_PAGE)
            status = AgentStatus(query["status"]) if query.get("status") else None
        except ValueError as exc:
            return _bad(str(exc))
        await self.sampler.latest()
        found = agents_page(self.sampler.records, capability=query.get("capability", ""),
                            text=query.get("q", ""), status=status, page=page, size=size,
                            spares=self.sampler.spares, rates=rates_of(self.sampler.edges))
        return JSONResponse(dataclasses.asdict(found))

    async def _traces(self, request: Request) -> Response:
        store = self.sampler.trace_store()
        if store is None:
            return JSONResponse({"available": False, "traces": []})
        query = request.query_params
        try:
            limit = _int(request, "limit", 50, 1, MAX_TRACES)
            status = SpanStatus(query["status"]) if query.get("status") else None
        except ValueError as exc:
            return _bad(str(exc))
        found = await store.find_traces(
            agent=query.get("agent") or None, capability=query.get("capability") or None,
            status=status, slowest=query.get("slowest") in ("1", "true"), limit=limit)
        return JSONResponse({"available": True,
                             "traces": [dataclasses.asdict(t) for t in found]})

    async def _trace(self, request: Request) -> Response:
        trace_id = request.path_params["trace_id"]
        if not _TRACE_ID.match(trace_id):
            return _bad("a trace ID is 32 lowercase hex digits")
        store = self.sampler.trace_store()
        if store is None:
            return JSONResponse({"error": "not_available",
                                 "message": "no trace store runs in this cluster"},
                                status_code=404)
        spans = await store.trace(trace_id)
        if not spans:
            return JSONResponse({"error": "not_found",
                                 "message": f"the trace store holds no span of {trace_id}"},
                                status_code=404)
        return JSONResponse(dataclasses.asdict(waterfall(trace_id, spans)))

    async def _letters(self, _request: Request) -> Response:
        letters = await self.sampler.letters()
        return JSONResponse({"letters": [dataclasses.asdict(d) for d in letters]})


__all__ = ["MAX_TRACES", "PREFIX", "STATIC", "ObserverRoutes", "is_public"]
