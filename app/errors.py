"""Citegate's errors, their codes, and the one handler that renders them as RFC 9457 problems.

``ErrorCode`` is the one list of the codes Citegate answers: each carries its status and says
when it is given. The README's error table is printed from it (``python -m app.errors``) and
the OpenAPI problem declarations are built from it (``app.api.problems``).

    CitegateError                 any error a client can act on; its code gives its status
    ├── NotFound                  404: unknown id, another tenant's id
    ├── InvalidRequest            422: the request is well-formed but cannot be honoured
    │   └── InvalidDocument       422: the uploaded document cannot be read (pdf_encrypted, …)
    ├── Unauthorized              401: no key, a malformed, unknown or revoked key (one answer)
    ├── Forbidden                 403: a valid key without the scope the route needs
    ├── RateLimited               429: a per-key limit is reached; says when to retry
    │   (app.auth.budgets.BudgetExceeded: 429 budget_exceeded, a budget is spent)
    ├── Conflict                  409: e.g. a conversation already answering a follow-up
    ├── MalformedBody             400: a body that cannot be read: not UTF-8 JSON, or a
    │                                  broken multipart form
    ├── PayloadTooLarge           413: the body or document exceeds the size limit
    ├── RequestTimeout            408: the body arrives too slowly
    ├── UnsupportedMediaType      415: a document of no supported format
    ├── UpstreamError             502, 503, 504, …: see app.upstream.errors
    └── DatabaseUnavailable       503: the database cannot be reached; see app.db.unavailable

Services raise these; they never import FastAPI. An exception of a lower layer that the app
translates (``install_error_handlers``: the database's failures to reach it) is answered as
its translation; anything else that escapes a route is logged and answered with a bare 500
``internal_error`` that carries no detail.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"

# Our own titles: Python's status phrases change between versions (422, 413 did in 3.13).
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class ErrorCode(StrEnum):
    """Every ``code`` Citegate answers, with its HTTP status and when it is given.

    A member is its code as a string (``ErrorCode.NOT_FOUND == "not_found"``); ``status``,
    ``problem_title`` and ``when`` say the rest. The order is the README's.
    """

    status: int
    when: str

    def __new__(cls, code: str, status: int, when: str) -> ErrorCode:
        member = str.__new__(cls, code)
        member._value_ = code
        member.status = status
        member.when = when
        return member

    @property
    def problem_title(self) -> str:
        """The problem's ``title``: one stable phrase per status (``title`` is a str method)."""
        return _TITLES[self.status]

    @classmethod
    def of(cls, code: str) -> ErrorCode:
        """The member whose code this is; a ValueError for any other string."""
        try:
            return _CODES[code]
        except KeyError:
            raise ValueError(f"{code!r} is not an ErrorCode") from None

    # The request itself
    VALIDATION_ERROR = (
        "validation_error",
        422,
        "a field is missing or invalid (`errors` lists them)",
    )
    MALFORMED_BODY = (
        "malformed_body",
        400,
        "a body that is not JSON or not sent as `application/json`, JSON that is not UTF-8, "
        "or a multipart form that is broken or cut short of its closing boundary",
    )
    HTTP_ERROR = "http_error", 400, "any other request that the HTTP layer refuses"
    NOT_FOUND = "not_found", 404, "no route has this path"
    METHOD_NOT_ALLOWED = "method_not_allowed", 405, "the path does not take this method"
    PAYLOAD_TOO_LARGE = (
        "payload_too_large",
        413,
        "a document over `CITEGATE_MAX_DOCUMENT_BYTES` (given as JSON, over it or 32 MiB), "
        "or a body too large to hold one",
    )
    DOCUMENT_PROCESSING = (
        "document_processing",
        409,
        "a question (or count, batch, conversation) about a document whose pages are still "
        "being read by OCR; `Retry-After` says when to ask again",
    )
    OCR_PAGE_LIMIT_EXCEEDED = (
        "ocr_page_limit_exceeded",
        413,
        "a PDF with more pages to read by OCR than `CITEGATE_OCR_MAX_PAGES`, refused before "
        "anything is stored",
    )
    INVALID_CURSOR = "invalid_cursor", 422, "a `cursor` that Citegate did not make"
    REQUEST_TIMEOUT = (
        "request_timeout",
        408,
        "a body that arrives slower than `CITEGATE_BODY_MIN_BYTES_PER_SECOND` once "
        "`CITEGATE_BODY_TIMEOUT_SECONDS` have passed; the connection is closed",
    )
    # Keys and limits
    UNAUTHORIZED = "unauthorized", 401, "no key, or a malformed, unknown or revoked one"
    RATE_LIMITED = "rate_limited", 429, "a per-key limit; `Retry-After` says when"
    BUDGET_EXCEEDED = (
        "budget_exceeded",
        429,
        "the key's or its tenant's `budget` for the period has not enough left for the "
        "request's maximum cost (`x-should-retry: false`)",
    )
    INSUFFICIENT_SCOPE = (
        "insufficient_scope",
        403,
        "a valid key without the scope the route needs (`read`, `write`, `admin`, `operator`), "
        "or granting a scope the caller does not hold",
    )
    API_KEY_NOT_FOUND = (
        "api_key_not_found",
        404,
        "an unknown key id, or another tenant's for an `admin` key",
    )
    API_KEY_REVOKED = (
        "api_key_revoked",
        409,
        "changing or rotating a revoked key (a revoked key stays revoked)",
    )
    TENANT_NOT_FOUND = (
        "tenant_not_found",
        404,
        "an unknown tenant id, or another tenant's for an `admin` key",
    )
    TENANT_NAME_TAKEN = "tenant_name_taken", 409, "a tenant with this name exists already"
    # Collections
    COLLECTION_NOT_FOUND = "collection_not_found", 404, "an unknown or deleted collection id"
    # Documents
    DOCUMENT_NOT_FOUND = "document_not_found", 404, "an unknown or deleted document id"
    UNSUPPORTED_MEDIA_TYPE = (
        "unsupported_media_type",
        415,
        "a document of no supported format (an image, a ZIP that is no Office file, a legacy .doc)",
    )
    EMPTY_DOCUMENT = (
        "empty_document",
        422,
        "an empty or whitespace-only file, or one with no visible text (an HTML page of "
        "script, a workbook with no rows)",
    )
    TEXT_NOT_UTF8 = (
        "text_not_utf8",
        422,
        "text that is not UTF-8, UTF-16 or UTF-32 with a BOM, nor in the declared `charset=`",
    )
    INVALID_TEXT = "invalid_text", 422, "text holding a NUL character"
    INVALID_BASE64 = "invalid_base64", 422, "`source.data` is not base64"
    PDF_INVALID = (
        "pdf_invalid",
        422,
        "a damaged or truncated PDF, or no PDF where one was declared",
    )
    PDF_ENCRYPTED = "pdf_encrypted", 422, "an encrypted PDF"
    DOCUMENT_ENCRYPTED = (
        "document_encrypted",
        422,
        "a password-protected Word, Excel or PowerPoint file",
    )
    OFFICE_FILE_INVALID = (
        "office_file_invalid",
        422,
        "a damaged or truncated .docx, .xlsx or .pptx (ZIP) file",
    )
    UNPACKED_TOO_LARGE = (
        "unpacked_too_large",
        422,
        "a .docx, .xlsx or .pptx that unpacks past `CITEGATE_MAX_UNPACKED_BYTES`",
    )
    TOO_MANY_ROWS = (
        "too_many_rows",
        422,
        "a spreadsheet with more rows than `CITEGATE_MAX_SHEET_ROWS`",
    )
    SPREADSHEET_INVALID = "spreadsheet_invalid", 422, "a CSV or TSV that cannot be read"
    # Seeing a citation
    PAGE_NOT_FOUND = "page_not_found", 404, "a page number past the PDF's last page"
    DOCUMENT_NOT_PDF = "document_not_pdf", 422, "a page image of a document that is not a PDF"
    # Answers and conversations
    ANSWER_NOT_FOUND = "answer_not_found", 404, "an unknown answer id"
    CONVERSATION_NOT_FOUND = (
        "conversation_not_found",
        404,
        "an unknown or deleted conversation id",
    )
    DUPLICATE_DOCUMENT_IDS = (
        "duplicate_document_ids",
        422,
        "`document_ids` lists a document more than once",
    )
    DOCUMENT_NOT_CITABLE = (
        "document_not_citable",
        422,
        'a question about a document without text (`"citable": false`)',
    )
    DOCUMENT_TOO_LARGE = (
        "document_too_large",
        422,
        'documents that do not fit one request whole, asked with `"mode": "documents"`',
    )
    CONVERSATION_BUSY = (
        "conversation_busy",
        409,
        "a follow-up while the conversation answers another",
    )
    # Answer batches
    ANSWER_BATCH_NOT_FOUND = "answer_batch_not_found", 404, "an unknown answer batch id"
    DUPLICATE_CUSTOM_IDS = (
        "duplicate_custom_ids",
        422,
        "a batch uses a `custom_id` for more than one request",
    )
    BATCH_TOO_LARGE = (
        "batch_too_large",
        413,
        "a batch whose requests, as sent upstream, are over the Messages API's 256 MB",
    )
    BATCH_NOT_ENDED = (
        "batch_not_ended",
        409,
        "the results of a Message Batch (`/anthropic`) asked before it has ended",
    )
    # The OpenAI-compatible API (`/openai`, where errors are in OpenAI's shape)
    UNSUPPORTED_PARAMETER = (
        "unsupported_parameter",
        400,
        "a parameter of OpenAI's that Citegate does not take, or a value of one that Claude "
        "cannot honour (several choices, logprobs, tools other than `file_search`); `param` "
        "names it",
    )
    INVALID_PARAMETER = (
        "invalid_parameter",
        400,
        "a parameter of an OpenAI-compatible request whose value is not valid; `param` names it",
    )
    # The upstream Messages API
    UPSTREAM_REJECTED = (
        "upstream_rejected",
        422,
        "the Messages API refused the request (its message is in `detail`)",
    )
    UPSTREAM_REQUEST_TOO_LARGE = (
        "upstream_request_too_large",
        413,
        "the Messages API refused the request as too large",
    )
    UPSTREAM_RATE_LIMITED = (
        "upstream_rate_limited",
        503,
        "the Messages API rate limits Citegate, after retries; with `Retry-After`",
    )
    UPSTREAM_OVERLOADED = (
        "upstream_overloaded",
        503,
        "the Messages API is overloaded, after retries; with `Retry-After`",
    )
    UPSTREAM_TIMEOUT = "upstream_timeout", 504, "the Messages API did not answer in time"
    UPSTREAM_BAD_RESPONSE = (
        "upstream_bad_response",
        502,
        "the Messages API answered something that is not a valid message",
    )
    UPSTREAM_AUTH_FAILED = (
        "upstream_auth_failed",
        502,
        "the Messages API refused Citegate's own key",
    )
    UPSTREAM_UNAVAILABLE = (
        "upstream_unavailable",
        502,
        "the Messages API failed after retries, or cannot be reached",
    )
    UPSTREAM_STREAM_INTERRUPTED = (
        "upstream_stream_interrupted",
        502,
        "the stream from the Messages API broke off in the middle of the answer",
    )
    # The database
    DATABASE_UNAVAILABLE = (
        "database_unavailable",
        503,
        "the database cannot be reached (connections refused or dropped, none free in time, "
        "a server starting or stopping); with `Retry-After`",
    )
    # Ours
    INTERNAL_ERROR = "internal_error", 500, "a failure of Citegate itself (logged; no detail)"


_CODES: dict[str, ErrorCode] = {str(code): code for code in ErrorCode}


class CitegateError(Exception):
    """An error with a stable ``code``; the code gives its HTTP status.

    ``code`` may be given as a plain string, which must name a member of ``ErrorCode``
    (tests/unit/test_error_codes.py checks every code written in app/).
    """

    # The code a subclass raises when none is given; None means that each raise names one.
    default_code: ClassVar[ErrorCode | None] = None
    # The status every code of this class has, when the class stands for one status.
    kind_status: ClassVar[int | None] = None

    def __init__(
        self,
        detail: str,
        *,
        code: ErrorCode | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        chosen = self.default_code if code is None else ErrorCode.of(code)
        if chosen is None:
            raise TypeError(f"{type(self).__name__} needs a code")
        if self.kind_status is not None and chosen.status != self.kind_status:
            raise TypeError(
                f"{type(self).__name__} is {self.kind_status}; {chosen} is {chosen.status}"
            )
        self.code: ErrorCode = chosen
        self.detail = detail
        self.headers = headers
        self.extra = extra

    @property
    def status(self) -> int:
        return self.code.status


class NotFound(CitegateError):
    kind_status = 404


class InvalidRequest(CitegateError):
    kind_status = 422


class InvalidDocument(InvalidRequest):
    pass


class Conflict(CitegateError):
    kind_status = 409


class Unauthorized(CitegateError):
    default_code = ErrorCode.UNAUTHORIZED

    def __init__(self) -> None:
        # The same words for every failure: nothing tells whether a key exists.
        super().__init__(
            "A valid API key is required: Authorization: Bearer <key>.",
            headers={"WWW-Authenticate": "Bearer"},
        )


class Forbidden(CitegateError):
    """A valid key that may not do this: ``insufficient_scope``."""

    default_code = ErrorCode.INSUFFICIENT_SCOPE
    kind_status = 403


class RateLimited(CitegateError):
    default_code = ErrorCode.RATE_LIMITED

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)}, retry_after=retry_after)


class MalformedBody(CitegateError):
    """A body that cannot be read at all, before any of its fields is looked at."""

    default_code = ErrorCode.MALFORMED_BODY
    kind_status = 400


class PayloadTooLarge(CitegateError):
    default_code = ErrorCode.PAYLOAD_TOO_LARGE
    kind_status = 413


class RequestTimeout(CitegateError):
    """A body that arrives too slowly: the rest of it is not waited for, and the connection is
    closed."""

    default_code = ErrorCode.REQUEST_TIMEOUT
    kind_status = 408

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Connection": "close"})


class UnsupportedMediaType(CitegateError):
    default_code = ErrorCode.UNSUPPORTED_MEDIA_TYPE
    kind_status = 415


# Codes for errors raised by the framework itself rather than by our services.
_HTTP_CODES = {
    code.status: code
    for code in (
        ErrorCode.MALFORMED_BODY,
        ErrorCode.NOT_FOUND,
        ErrorCode.METHOD_NOT_ALLOWED,
        ErrorCode.PAYLOAD_TOO_LARGE,
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    )
}


def problem_body(code: ErrorCode, detail: str, **extra: Any) -> dict[str, Any]:
    """An RFC 9457 problem document: type, title, status, detail, code, plus extra members."""
    return {
        "type": f"urn:citegate:problem:{code}",
        "title": code.problem_title,
        "status": code.status,
        "detail": detail,
        "code": str(code),
        **extra,
    }


def problem_of(error: CitegateError) -> dict[str, Any]:
    return problem_body(error.code, error.detail, **error.extra)


def problem_response(
    code: ErrorCode,
    detail: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem+json response, with the status of its code."""
    body = problem_body(code, detail, **extra)
    return JSONResponse(
        body, status_code=code.status, headers=headers, media_type=PROBLEM_MEDIA_TYPE
    )


ErrorRenderer = Callable[[CitegateError], Response]


def render_problem(error: CitegateError) -> Response:
    """The problem+json response for an error: what every route but the Anthropic-compatible
    ones answers."""
    return problem_response(error.code, error.detail, headers=error.headers, **error.extra)


class ErrorRendering:
    """How an error is answered for a path: problem+json, unless the path starts with one of
    ``by_prefix``'s prefixes (``/anthropic/`` answers in the Messages API's shape)."""

    def __init__(self, by_prefix: Mapping[str, ErrorRenderer] | None = None) -> None:
        self._by_prefix = tuple((by_prefix or {}).items())

    def response(self, path: str, error: CitegateError) -> Response:
        for prefix, render in self._by_prefix:
            if path.startswith(prefix):
                return render(error)
        return render_problem(error)


def _http_error(exc: StarletteHTTPException) -> CitegateError:
    code = _HTTP_CODES.get(exc.status_code, ErrorCode.HTTP_ERROR)
    detail = exc.detail if isinstance(exc.detail, str) else code.problem_title
    headers = dict(exc.headers or {})
    if code is ErrorCode.PAYLOAD_TOO_LARGE:
        detail = "The request body exceeds the size limit."
        # The rest of the body is never read: close rather than wait for the client to send it.
        headers["Connection"] = "close"
    return CitegateError(detail, code=code, headers=headers)


def _validation_error(exc: RequestValidationError) -> CitegateError:
    malformed = _malformed_json(exc)
    if malformed is not None:
        return malformed
    errors = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]
    return CitegateError(
        "The request is not valid; see errors.", code=ErrorCode.VALIDATION_ERROR, errors=errors
    )


def _malformed_json(exc: RequestValidationError) -> MalformedBody | None:
    """FastAPI reports a body that is not JSON as a validation error of the body as a whole
    (its ``loc`` the body and the character where reading stopped), and a body sent without a
    JSON content-type as the body's bytes, which are no object; neither is a field's fault."""
    match exc.errors():
        case [{"type": "json_invalid", "loc": ("body", int(position)), "ctx": {"error": reason}}]:
            return MalformedBody(f"The request body is not JSON: {reason} at character {position}.")
        case [{"loc": ("body",), "input": bytes()}]:
            return MalformedBody(
                "The request body is not JSON: it was not sent as application/json."
            )
    return None


def _unexpected_error(exc: Exception) -> CitegateError:
    log.exception("unhandled error", exc_info=exc)
    return CitegateError("An unexpected error occurred.", code=ErrorCode.INTERNAL_ERROR)


def _as_citegate_error(exc: Exception) -> CitegateError:
    if isinstance(exc, CitegateError):
        return exc
    if isinstance(exc, StarletteHTTPException):
        # FastAPI answers any failure to read a body with a 400 whose cause is that failure;
        # one of ours (a body check's MalformedBody) says what was wrong.
        if isinstance(exc.__cause__, CitegateError):
            return exc.__cause__
        if not 400 <= exc.status_code < 500 and exc.status_code not in _HTTP_CODES:
            return _unexpected_error(exc)
        return _http_error(exc)
    if isinstance(exc, RequestValidationError):
        return _validation_error(exc)
    return _unexpected_error(exc)


# What makes an exception of a lower layer one of Citegate's errors; None when it is not one.
Translation = Callable[[Exception], CitegateError | None]


def install_error_handlers(
    app: FastAPI,
    rendering: ErrorRendering | None = None,
    translated: Mapping[type[Exception], Translation] | None = None,
) -> None:
    """Answer every error the app can raise: problem+json, or as ``rendering`` says for its
    path. ``translated``: exceptions of the layers below that can be a client's to know (the
    database cannot be reached), each with its translation; one it leaves untranslated goes on
    as any unexpected error, a 500."""
    chosen = rendering or ErrorRendering()

    async def handle(request: Request, exc: Exception) -> Response:
        return chosen.response(request.url.path, _as_citegate_error(exc))

    for raised in (CitegateError, StarletteHTTPException, RequestValidationError, Exception):
        app.add_exception_handler(raised, handle)

    def handler(translate: Translation) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def handle_translated(request: Request, exc: Exception) -> Response:
            error = translate(exc)
            if error is None:
                raise exc  # on to the handler of Exception, as if this one were not there
            return chosen.response(request.url.path, error)

        return handle_translated

    for raised, translate in (translated or {}).items():
        app.add_exception_handler(raised, handler(translate))


README_HEADER = "| code | status | when |\n|---|---|---|\n"


def readme_table() -> str:
    """The README's table of error codes, one row per code in the enumeration's order."""
    rows = "".join(f"| `{code}` | {code.status} | {code.when} |\n" for code in ErrorCode)
    return README_HEADER + rows


if __name__ == "__main__":
    sys.stdout.write(readme_table())
