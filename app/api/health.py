"""Liveness and readiness."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.auth.keys import any_key_exists
from app.auth.limits import KeyLimits, StoreState

router = APIRouter(tags=["operations"])


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    database: Literal["ok", "unavailable"]
    upstream: str
    auth: Literal["open", "keys", "unknown"]
    rate_limits: StoreState = Field(
        description="Where per-key rate limits are counted: memory (this process), ok (Redis "
        "answers) or unavailable (Redis does not answer: requests are served without rate "
        "limits until it does). Readiness does not depend on it."
    )


@router.get("/healthz", operation_id="getHealth", summary="The process is up (no I/O)")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    operation_id="getReadiness",
    summary="The database answers; says which upstream answers questions",
    description="200 when the database answers, 503 when it does not. A rate-limit store "
    "(Redis) that does not answer leaves the service ready, since it still answers: requests "
    "are then served without rate limits, and `rate_limits` says `unavailable`.",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "The database does not answer."}},
)
async def readyz(request: Request) -> JSONResponse:
    database: Literal["ok", "unavailable"] = "ok"
    auth: Literal["open", "keys", "unknown"] = "unknown"
    try:
        async with request.app.state.sessions() as session:
            # "open" warns that anyone reaching the service can read and write its data.
            auth = "keys" if await any_key_exists(session) else "open"
    except Exception:  # any failure to reach the database means not ready
        database = "unavailable"
    limits: KeyLimits = request.app.state.key_limits
    rate_limits = await limits.store_state()
    ready = database == "ok"  # a service without its rate-limit store still answers
    body = Readiness(
        status="ready" if ready else "unavailable",
        database=database,
        upstream=request.app.state.settings.upstream_name,
        auth=auth,
        rate_limits=rate_limits,
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
