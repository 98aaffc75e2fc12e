"""The gateway's JSON-RPC endpoint: the SDK's dispatcher, with reach's intake in front of it and
reach's screen behind it.

In front, before the SDK sees a request:

- the body is read by :func:`reach.strict_json.loads` (UTF-8, no NaN or Infinity, numbers that
  fit a 64-bit float, nesting at most :attr:`GatewayOptions.max_json_depth` deep, no unpaired
  surrogates): anything else is a parse error, -32700, saying which rule it broke;
- an ``A2A-Version`` header longer than :data:`MAX_VERSION_CHARS` is VersionNotSupported
  (-32009), as any other version reach does not speak;
- where the gateway traces, the call is a server span continuing the caller's ``traceparent``
  (:mod:`reach.a2a.tracing`), lasting until the last event of a stream that answers it.

Behind: every -32603 the dispatcher would send, with whatever exception text it holds, is
replaced by reach's (:func:`reach.a2a.server.errors.internal_error`: an error ID for the client, the
story in the log), in plain responses and in SSE streams alike. The client's mistakes are the
SDK's -32600/-32601/-32602 and reach's -32602 (see :mod:`reach.a2a.server.errors`).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.constants import VERSION_HEADER
from a2a.utils.error_handlers import A2A_DOMAIN, ERROR_INFO_TYPE
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError, VersionNotSupportedError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reach.a2a.server.errors import error_data, internal_error, is_screened
from reach.a2a.server.handler import PRINCIPAL_SCOPE_KEY
from reach.a2a.tracing import end_with_stream, served
from reach.errors import CodecError
from reach.strict_json import loads

#: Longest ``A2A-Version`` header value read (``1.0`` is three characters).
MAX_VERSION_CHARS = 32
_INTERNAL = -32603
_REFUSAL = "the body is not JSON the gateway reads"


class _Parsed(Request):
    """A request whose body has been read already, as the JSON document given."""

    def __init__(self, request: Request, doc: Any) -> None:
        super().__init__(request.scope, request.receive)
        self._doc = doc

    async def json(self) -> Any:
        """The document (read once, by the intake)."""
        return self._doc


class GatewayDispatcher(JsonRpcDispatcher):
    """The SDK's JSON-RPC dispatcher with reach's intake and screen (see the module's
    docstring).

    Args:
        handler: The request handler.
        context_builder: Builds each call's context.
        max_depth: See :attr:`reach.web.options.GatewayOptions.max_json_depth`.
    """

    def __init__(self, handler: RequestHandler, context_builder: ServerCallContextBuilder,
                 *, max_depth: int) -> None:
        super().__init__(handler, context_builder)
        self._max_depth = max_depth

    async def handle_requests(self, request: Request) -> Response:
        """Reads the body strictly, checks the version's length, then dispatches."""
        try:
            doc = loads(await request.body(), max_depth=self._max_depth, refusal=_REFUSAL)
        except CodecError as exc:
            return self._generate_error_response(None, JSONParseError(
                message=exc.message, data=[{"@type": ERROR_INFO_TYPE, "reason": "PARSE_ERROR",
                                            "domain": A2A_DOMAIN, "metadata": error_data(exc)}]))
        version = request.headers.get(VERSION_HEADER)
        if version is not None and len(version) > MAX_VERSION_CHARS:
            return self._generate_error_response(_request_id(doc), VersionNotSupportedError(
                f"A2A version '{version[:8]}...' ({len(version)} characters) is not supported: "
                "reach answers A2A 1.0 (send A2A-Version: 1.0)"))
        method = doc.get("method") if isinstance(doc, dict) else None
        with served(method if isinstance(method, str) else "call", request.headers,
                    str(request.scope.get(PRINCIPAL_SCOPE_KEY, ""))):
            response: Response = await super().handle_requests(_Parsed(request, doc))
        return response

    def _generate_error_response(self, request_id: str | int | None,
                                 error: Exception | JSONRPCError | A2AError) -> JSONResponse:
        # Every error the dispatcher catches comes here, inside its except block.
        if _code(error) == _INTERNAL and not is_screened(_data(error)):
            cause = sys.exc_info()[1]
            error = internal_error(cause if cause is not None else _message(error))
        response: JSONResponse = super()._generate_error_response(request_id, error)
        return response

    def _create_response(self, context: ServerCallContext,
                         handler_result: AsyncGenerator[dict[str, Any]] | dict[str, Any],
                         ) -> Response:
        request_id = context.state.get("request_id")
        if isinstance(handler_result, AsyncGenerator):
            handler_result = _screened_stream(handler_result, request_id, end_with_stream())
        else:
            handler_result = _screened(handler_result, request_id)
        response: Response = super()._create_response(context, handler_result)
        return response


def _screened(item: dict[str, Any], request_id: str | int | None) -> dict[str, Any]:
    """A JSON-RPC response, its -32603 (if any) replaced by reach's."""
    error = item.get("error")
    if not isinstance(error, dict) or error.get("code") != _INTERNAL:
        return item
    details = error.get("data")
    first = details[0] if isinstance(details, list) and details else {}
    if is_screened(first.get("metadata") if isinstance(first, dict) else None):
        return item
    return build_error_response(request_id, internal_error(str(error.get("message", ""))))


async def _screened_stream(items: AsyncGenerator[dict[str, Any]], request_id: str | int | None,
                           ended: Callable[[], None] | None) -> AsyncGenerator[dict[str, Any]]:
    """The stream's events screened (see :func:`_screened`); ``ended`` is called once it is
    over, however it ends."""
    try:
        async for item in items:
            yield _screened(item, request_id)
    except Exception as exc:  # the stream's end, told without internals
        yield build_error_response(request_id, internal_error(exc))
    finally:
        try:
            await items.aclose()
        finally:
            if ended is not None:
                ended()


def _code(error: Exception | JSONRPCError | A2AError) -> int:
    if isinstance(error, JSONRPCError):
        return error.code
    if isinstance(error, A2AError):
        return JSON_RPC_ERROR_CODE_MAP.get(type(error), _INTERNAL)
    return _INTERNAL


def _data(error: Exception | JSONRPCError | A2AError) -> Any:
    return error.data if isinstance(error, JSONRPCError | A2AError) else None


def _message(error: Exception | JSONRPCError | A2AError) -> str:
    return error.message if isinstance(error, JSONRPCError | A2AError) else str(error)


def _request_id(doc: Any) -> str | int | None:
    rid = doc.get("id") if isinstance(doc, dict) else None
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def jsonrpc_routes(handler: RequestHandler, path: str, context_builder: ServerCallContextBuilder,
                   *, max_depth: int) -> list[Route]:
    """The JSON-RPC route at ``path`` (as the SDK's ``create_jsonrpc_routes``, through
    :class:`GatewayDispatcher`)."""
    dispatcher = GatewayDispatcher(handler, context_builder, max_depth=max_depth)
    return [Route(path=path, endpoint=dispatcher.handle_requests, methods=["POST"])]


__all__ = ["MAX_VERSION_CHARS", "GatewayDispatcher", "jsonrpc_routes"]
