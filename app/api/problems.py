"""The problem+json document, and the OpenAPI declarations of the errors a route can give.

Every error is rendered by ``app.errors`` as an RFC 9457 problem document; ``Problem`` is its
schema, published as the ``Problem`` component. ``problems(404, 422)`` declares those statuses
with that schema, a description that lists the codes of that status (from ``ErrorCode``) and
an example, for a route's ``responses``.

The component is registered by the routes whose every body is a problem document (the
``204 No Content`` deletes, with ``response_class=ProblemResponse`` and ``model=True``): FastAPI
puts the ``model`` of a route's additional responses under the media type of the route's
response class, so only there can a model be declared under ``application/problem+json``.
Other routes refer to the component; tests/e2e/test_openapi.py checks that every reference
resolves.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from app.errors import PROBLEM_MEDIA_TYPE, ErrorCode, problem_body

PROBLEM_REF = "#/components/schemas/Problem"


class FieldError(BaseModel):
    """One field of the request that is missing or invalid."""

    loc: list[str | int] = Field(
        description="Where: `body`, `query`, `path` or `header`, then the field's path.",
        examples=[["body", "question"]],
    )
    msg: str = Field(examples=["String should have at least 1 character"])
    type: str = Field(description="A stable machine name.", examples=["string_too_short"])


class Problem(BaseModel):
    """An RFC 9457 problem document: every error Citegate answers, with a stable `code`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                problem_body(
                    ErrorCode.DOCUMENT_NOT_FOUND, "No document with id 'doc_01jf3k2m4n5p'."
                )
            ]
        }
    )

    type: str = Field(
        description="A URI naming the kind of problem: `urn:citegate:problem:<code>`.",
        examples=["urn:citegate:problem:document_not_found"],
    )
    title: str = Field(description="The HTTP status phrase.", examples=["Not Found"])
    status: int = Field(ge=100, le=599, description="The HTTP status code.", examples=[404])
    detail: str = Field(description="What went wrong, for a person to read.")
    code: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        description=(
            "A stable snake_case machine name, e.g. `document_not_found`. The codes of today "
            "are the examples; each error response lists those of its status. A client should "
            "still expect new ones."
        ),
        examples=[str(code) for code in ErrorCode],
    )
    errors: list[FieldError] | SkipJsonSchema[None] = Field(
        default=None, description="The invalid fields, for `validation_error`."
    )
    upstream_request_id: str | None = Field(
        default=None,
        description="The upstream API's request id, on errors of the upstream (when known).",
    )
    retry_after: Annotated[int, Field(ge=0)] | SkipJsonSchema[None] = Field(
        default=None,
        description="Seconds to wait before retrying, as the `Retry-After` header says.",
    )


class ProblemResponse(JSONResponse):
    """The response class of routes whose every body is a problem document (204 routes)."""

    media_type = PROBLEM_MEDIA_TYPE


# Codes that no route declares: given before any route matches, or never over HTTP. They are
# listed with the others in the Problem component's `code`.
_NOT_FROM_A_ROUTE = {
    ErrorCode.NOT_FOUND,
    ErrorCode.METHOD_NOT_ALLOWED,
    ErrorCode.API_KEY_NOT_FOUND,
}


# Codes only the OpenAI-compatible routes give (in OpenAI's error shape; not in this document).
_ONLY_UNDER_OPENAI = {ErrorCode.UNSUPPORTED_PARAMETER, ErrorCode.INVALID_PARAMETER}


def codes_of(status: int) -> list[ErrorCode]:
    """The codes that a route's response with this status can carry, in the enumeration's order."""
    return [
        code
        for code in ErrorCode
        if code.status == status and code not in _NOT_FROM_A_ROUTE | _ONLY_UNDER_OPENAI
    ]


def _described(status: int, description: str) -> str:
    listed = "\n".join(f"- `{code}`: {code.when}" for code in codes_of(status))
    return f"{description}\n\n`code` is one of:\n\n{listed}"


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer", "minimum": 0},
    }
}

_DECLARATIONS: dict[int, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # status: (description, example, headers)
    400: (
        "The body cannot be read as UTF-8 JSON (or, for an upload, as a multipart form); a "
        "body that is read but whose fields are wrong is a 422.",
        problem_body(
            ErrorCode.MALFORMED_BODY,
            "The request body is not JSON: Expecting ',' delimiter at character 42.",
        ),
        {},
    ),
    401: (
        "No API key, or one that is malformed, unknown or revoked.",
        problem_body(
            ErrorCode.UNAUTHORIZED, "A valid API key is required: Authorization: Bearer <key>."
        ),
        {
            "WWW-Authenticate": {
                "description": "`Bearer`: how to authenticate.",
                "schema": {"type": "string"},
            }
        },
    ),
    404: (
        "No such resource for this tenant (another tenant's id answers the same).",
        problem_body(ErrorCode.DOCUMENT_NOT_FOUND, "No document with id 'doc_01jf3k2m4n5p'."),
        {},
    ),
    409: (
        "The conversation is answering another follow-up; ask again when it is done.",
        problem_body(
            ErrorCode.CONVERSATION_BUSY,
            "The conversation is answering another follow-up; ask again when it is done.",
        ),
        {},
    ),
    403: (
        "The API key is valid but lacks the scope this route needs (`insufficient_scope`).",
        problem_body(
            ErrorCode.INSUFFICIENT_SCOPE,
            "This API key lacks the `write` scope that this route needs.",
        ),
        {},
    ),
    413: (
        "The body or the document is larger than the limit.",
        problem_body(
            ErrorCode.PAYLOAD_TOO_LARGE, "The document exceeds the limit of 33554432 bytes."
        ),
        {},
    ),
    415: (
        "The document is of no supported format.",
        problem_body(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            "Supported documents are PDF, Word (.docx), Excel (.xlsx), PowerPoint (.pptx), "
            "HTML, Markdown, CSV, TSV and plain text.",
        ),
        {},
    ),
    422: (
        "The request is invalid (`validation_error` lists the fields in `errors`) or cannot "
        "be honoured.",
        problem_body(
            ErrorCode.VALIDATION_ERROR,
            "The request is not valid; see errors.",
            errors=[
                {
                    "loc": ["body", "question"],
                    "msg": "String should have at least 1 character",
                    "type": "string_too_short",
                }
            ],
        ),
        {},
    ),
    429: (
        "The API key's request or token limit is reached: retry after `retry_after` seconds; "
        "or a budget of the key or its tenant is spent (`budget_exceeded`, not to retry).",
        problem_body(
            ErrorCode.RATE_LIMITED,
            "More than 60 requests in a minute with this key.",
            retry_after=17,
        ),
        _RETRY_AFTER,
    ),
    502: (
        "The upstream API failed or answered something that is not a valid message.",
        problem_body(
            ErrorCode.UPSTREAM_UNAVAILABLE,
            "The upstream API is unavailable.",
            upstream_request_id="req_011CV7x8y9z",
        ),
        {},
    ),
    503: (
        "The database cannot be reached, or the upstream API is rate limiting or overloaded; "
        "retry after `retry_after` seconds.",
        problem_body(
            ErrorCode.DATABASE_UNAVAILABLE,
            "The database cannot be reached; retry after a moment.",
            retry_after=1,
        ),
        _RETRY_AFTER,
    ),
    504: (
        "The upstream API did not answer in time.",
        problem_body(
            ErrorCode.UPSTREAM_TIMEOUT,
            "The upstream API did not answer in time.",
            upstream_request_id=None,
        ),
        {},
    ),
}

# What the auth dependency of every /v1 route can answer; it reads keys from the database,
# as every /v1 route does (503 database_unavailable when it cannot be reached).
AUTH_PROBLEMS = (401, 403, 429, 503)
# What a route with a request body can answer before it reads the body's fields.
BODY_PROBLEMS = (400, 422)
# What a call to the upstream can add.
UPSTREAM_PROBLEMS = (413, 502, 503, 504)


def links(parameter: str, *operation_ids: str) -> dict[str, dict[str, Any]]:
    """OpenAPI links: the operations that take the `id` of this response as ``parameter``."""
    return {
        operation_id: {
            "operationId": operation_id,
            "parameters": {parameter: "$response.body#/id"},
        }
        for operation_id in operation_ids
    }


def problems(*statuses: int, model: bool = False) -> dict[int | str, dict[str, Any]]:
    """``responses`` entries for these error statuses: problem+json with the Problem schema.

    ``model=True`` declares ``Problem`` as the model, which registers the component; only for
    routes whose response class is ``ProblemResponse`` (see the module docstring).
    """
    declared: dict[int | str, dict[str, Any]] = {}
    for status in sorted(set(statuses)):
        description, example, headers = _DECLARATIONS[status]
        description = _described(status, description)
        media: dict[str, Any] = {"example": example}
        if not model:
            media["schema"] = {"$ref": PROBLEM_REF}
        response: dict[str, Any] = {
            "description": description,
            "content": {PROBLEM_MEDIA_TYPE: media},
        }
        if model:
            response["model"] = Problem
        if headers:
            response["headers"] = headers
        declared[status] = response
    return declared
