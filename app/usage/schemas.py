"""Usage and cost reports as the API shows them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class UsageResult(BaseModel):
    """One group's usage in a bucket; the fields it is grouped by, the others absent."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "ten_01jf3k2m4n5p",
                    "model": "claude-sonnet-4-5",
                    "requests": 12,
                    "batch_requests": 2,
                    "input_tokens": 36000,
                    "output_tokens": 2400,
                    "cache_creation_input_tokens": 12000,
                    "cache_read_input_tokens": 120000,
                }
            ]
        }
    )

    tenant_id: str | None = Field(default=None, description="With `group_by=tenant_id`.")
    api_key_id: str | None = Field(
        default=None, description="With `group_by=api_key_id`; null: the service ran open."
    )
    model: str | None = Field(default=None, description="With `group_by=model`.")
    requests: int = Field(description="Upstream calls that answered (stored answers).")
    batch_requests: int = Field(description="Of those, answers of batches.")
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class CostResult(BaseModel):
    """One group's cost in a bucket: USD as a decimal string, the batch discount applied."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": "claude-sonnet-4-5", "amount": "0.1548", "currency": "USD"}]
        }
    )

    tenant_id: str | None = Field(default=None, description="With `group_by=tenant_id`.")
    api_key_id: str | None = Field(default=None, description="With `group_by=api_key_id`.")
    model: str | None = Field(default=None, description="With `group_by=model`.")
    amount: str = Field(pattern=r"^[0-9]+(\.[0-9]+)?$", description="USD, exact.")
    currency: str = "USD"


class UsageBucket(BaseModel):
    starting_at: datetime
    ending_at: datetime
    results: list[UsageResult]


class CostBucket(BaseModel):
    starting_at: datetime
    ending_at: datetime
    results: list[CostResult]


class UsageReport(BaseModel):
    """Usage per time bucket: every upstream call that answered, from the stored answers."""

    data: list[UsageBucket]


class CostReport(BaseModel):
    """Cost per time bucket, priced by the table of `price_table_version`."""

    data: list[CostBucket]
    price_table_version: str
