"""The answer batches half of the contract."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.answers.answer import AnswerOut
from app.upstream.wire import CUSTOM_ID_PATTERN, MAX_BATCH_REQUESTS

# What a batch request may not have of createAnswer's body: it is never streamed, and it is no
# follow-up (turns of a conversation are asked one after the other).
NOT_IN_BATCHES = ("stream", "conversation_id")


class AnswerBatchItem(BaseModel):
    """One question of a batch: its `custom_id` and the fields of createAnswer's body
    (`AnswerRequest`) except `stream` and `conversation_id`."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "custom_id": "q-1",
                    "question": "What color is the grass?",
                    "document_ids": ["doc_01jf3k2m4n5p"],
                }
            ]
        },
    )

    custom_id: str = Field(
        pattern=CUSTOM_ID_PATTERN,
        description="Names the request's result; unique in the batch. The other fields are "
        "checked as createAnswer checks them, each request on its own: one that cannot be "
        "asked (fields not valid, unknown or uncitable documents) is an `errored` result with "
        "its problem, and the others are asked.",
    )


class AnswerBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: list[AnswerBatchItem] = Field(min_length=1, max_length=MAX_BATCH_REQUESTS)


class RequestCounts(BaseModel):
    processing: int = Field(ge=0, description="Not answered yet.")
    succeeded: int = Field(ge=0)
    errored: int = Field(ge=0)
    canceled: int = Field(ge=0)
    expired: int = Field(ge=0)


class AnswerBatchOut(BaseModel):
    """A batch. `ended` once every result is stored; `request_counts` count them as they are."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "batch_01jf3k2m4n5p",
                    "status": "ended",
                    "request_counts": {
                        "processing": 0,
                        "succeeded": 99,
                        "errored": 1,
                        "canceled": 0,
                        "expired": 0,
                    },
                    "created_at": "2025-01-01T12:00:00Z",
                    "ended_at": "2025-01-01T12:40:00Z",
                    "expires_at": "2025-01-02T12:00:00Z",
                }
            ]
        }
    )

    id: str
    status: Literal["validating", "in_progress", "canceling", "ended"]
    request_counts: RequestCounts
    created_at: datetime
    ended_at: datetime | None
    expires_at: datetime


class AnswerBatchPage(BaseModel):
    data: list[AnswerBatchOut]
    next_cursor: str | None


class AnswerBatchResult(BaseModel):
    """A request's result: its Answer when it `succeeded`; its problem when it `errored`
    (neither when it was `canceled` or `expired`)."""

    custom_id: str
    status: Literal["succeeded", "errored", "canceled", "expired"]
    answer: AnswerOut | None
    error: dict[str, Any] | None = Field(
        json_schema_extra={"anyOf": [{"$ref": "#/components/schemas/Problem"}, {"type": "null"}]}
    )


class AnswerBatchResultPage(BaseModel):
    data: list[AnswerBatchResult]
    next_cursor: str | None
