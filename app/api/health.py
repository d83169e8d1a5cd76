"""Liveness and readiness."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.auth.keys import any_key_exists

router = APIRouter(tags=["operations"])


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    database: Literal["ok", "unavailable"]
    upstream: str
    auth: Literal["open", "keys", "unknown"]


@router.get("/healthz", operation_id="getHealth", summary="The process is up (no I/O)")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    operation_id="getReadiness",
    summary="The database answers; says which upstream answers questions",
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
    ready = database == "ok"
    body = Readiness(
        status="ready" if ready else "unavailable",
        database=database,
        upstream=request.app.state.settings.upstream_name,
        auth=auth,
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
