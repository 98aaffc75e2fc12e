"""Every failure of a call to a remote A2A agent, as reach's typed error: translated here only.

Whatever the a2a-sdk client or httpx raised (an A2A error the remote answered, an HTTP status, a
timeout, a refused connection) becomes one of reach's errors in :func:`error_for`, as httpx maps
httpcore's errors in one place; and a task that ended failed, rejected or canceled becomes one
in :func:`check_reply`. Retryable: what another try, here or on another holder of the
capability, may mend (the remote unreachable, busy, slow, or failing inside); fatal: what it
cannot (refused credentials, a payload the remote refuses, a protocol mismatch, an unknown task).
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from a2a.client.errors import A2AClientError, A2AClientTimeoutError, AgentCardResolutionError
from a2a.utils import errors as a2a_errors

from reach.a2a.client.models import A2AState
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    AuthError,
    Detail,
    HandlerError,
    InvalidPayload,
    InvalidTransition,
    ProtocolError,
    ReachError,
    RequestTimeout,
    Severity,
    TaskCancelled,
    TaskNotFound,
)


def check_reply(state: A2AState, text: str, task_id: str, remote: str) -> None:
    """Raises the error a task's end state means; returns for any other state.

    Raises:
        HandlerError: the task failed (retryable: the remote, or another holder, may succeed),
            or was rejected (fatal: the agent refuses the work).
        TaskCancelled: the task was canceled on the remote side.
    """
    details: dict[str, Detail] = {
        "remote": remote, "a2a_state": state.value, "task_id": task_id}
    said = f": {text}" if text else ""
    if state is A2AState.FAILED:
        raise HandlerError(f"the remote A2A agent's task failed{said}", details=details)
    if state is A2AState.REJECTED:
        raise HandlerError(f"the remote A2A agent rejected the task{said}",
                           severity=Severity.FATAL, details=details)
    if state is A2AState.CANCELED:
        raise TaskCancelled(f"the remote A2A agent's task was canceled{said}", details=details)


#: A2A's own errors (by the SDK's class), as reach errors: the class and its rule.
_A2A_ERRORS: Mapping[type[a2a_errors.A2AError], tuple[type[ReachError], str]] = {
    a2a_errors.InvalidParamsError: (InvalidPayload, "invalid_params"),
    a2a_errors.ContentTypeNotSupportedError: (InvalidPayload, "content_type_not_supported"),
    a2a_errors.TaskNotFoundError: (TaskNotFound, "task_not_found"),
    a2a_errors.TaskNotCancelableError: (InvalidTransition, "task_not_cancelable"),
    a2a_errors.InvalidRequestError: (ProtocolError, "invalid_request"),
    a2a_errors.JSONParseError: (ProtocolError, "parse_error"),
    a2a_errors.MethodNotFoundError: (ProtocolError, "method_not_found"),
    a2a_errors.UnsupportedOperationError: (ProtocolError, "unsupported_operation"),
    a2a_errors.VersionNotSupportedError: (ProtocolError, "version_not_supported"),
    a2a_errors.ExtensionSupportRequiredError: (ProtocolError, "extension_support_required"),
    a2a_errors.PushNotificationNotSupportedError: (ProtocolError, "push_not_supported"),
    a2a_errors.ExtendedAgentCardNotConfiguredError: (ProtocolError, "extended_card"),
    a2a_errors.InternalError: (HandlerError, "internal_error"),
    a2a_errors.InvalidAgentResponseError: (HandlerError, "invalid_agent_response"),
}


def error_for(exc: BaseException, remote: str) -> ReachError:
    """The reach error a failed call to a remote A2A agent makes (``remote``: its URL).

    Transport failures, timeouts, 5xx answers and the remote's internal errors are retryable
    (:class:`AgentUnavailable`, :class:`RequestTimeout`, :class:`HandlerError`); what retrying
    cannot mend is fatal: refused credentials (:class:`AuthError`), a payload the remote refuses
    (:class:`InvalidPayload`), a protocol mismatch (:class:`ProtocolError`), an unknown task.
    """
    if isinstance(exc, ReachError):
        return exc
    details: dict[str, Detail] = {"remote": remote}
    if isinstance(exc, a2a_errors.A2AError) and not isinstance(exc, A2AClientError):
        kind, rule = _A2A_ERRORS.get(type(exc), (HandlerError, "a2a_error"))
        code = a2a_errors.JSON_RPC_ERROR_CODE_MAP.get(type(exc))
        details.update(rule=rule, a2a_code=code)
        return kind(f"the remote A2A agent answered {type(exc).__name__}: {exc.message}",
                    details=details)
    status = _http_status(exc)
    if status is not None:
        return _for_status(status, exc, details)
    return _for_transport(exc, remote, details)


def _for_transport(exc: BaseException, remote: str,
                   details: dict[str, Detail]) -> ReachError:
    """The error of a call that got no HTTP answer to map (or an answer that was not A2A)."""
    if isinstance(exc, A2AClientTimeoutError | httpx.TimeoutException | TimeoutError):
        return RequestTimeout(f"the remote A2A agent at {remote} did not answer in time",
                              details=details)
    if isinstance(exc, httpx.TransportError) or isinstance(exc.__cause__, httpx.TransportError):
        return AgentUnavailable(f"the remote A2A agent at {remote} is unreachable: {exc}",
                                suggestion="retry later, or on another holder of the capability",
                                details=details)
    if isinstance(exc, AgentCardResolutionError):  # an answer, but not a card
        return ProtocolError(f"not an A2A agent card: {exc.message}",
                             details={**details, "rule": "a2a_card"})
    return HandlerError(f"calling the remote A2A agent at {remote} failed: "
                        f"{type(exc).__name__}: {exc}",
                        details={**details, "type": type(exc).__name__})


def _http_status(exc: BaseException) -> int | None:
    if isinstance(exc, AgentCardResolutionError) and exc.status_code is not None:
        return exc.status_code
    for err in (exc, exc.__cause__):
        if isinstance(err, httpx.HTTPStatusError):
            return err.response.status_code
    return None


def _for_status(status: int, exc: BaseException,
                details: dict[str, Detail]) -> ReachError:
    details["http_status"] = status
    said = f"the remote A2A agent at {details['remote']} answered HTTP {status}"
    if status in (401, 403):
        return AuthError(f"{said}: it refused reach's credentials",
                         suggestion="pass the token it expects: connect(..., token=...)",
                         details={**details, "reason": "remote_refused"})
    if status == 404:
        return AgentNotFound(f"{said}: nothing answers there", details=details)
    if status in (408, 429) or status >= 502:
        return AgentUnavailable(f"{said}: busy or down", suggestion="retry later",
                                details=details)
    if status in (413, 415, 422):
        return InvalidPayload(f"{said}: it refused the payload", details=details)
    if status == 500:
        return HandlerError(f"{said}: {exc}", details=details)
    return ProtocolError(f"{said}: {exc}", details={**details, "rule": "http_status"})


__all__ = ["check_reply", "error_for"]
