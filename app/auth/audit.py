"""Audit events: every admin action, with who (the key and its tenant, or the command line),
what (the action, its target, the fields it set), when, and from where (the client's address
and the request's id). Recorded in the transaction of the change itself, so a change is never
stored without its event, nor an event without its change. Never a secret, nor its hash: the
fields recorded are the ones a caller may read back anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scopes import Principal
from app.db.models import AuditEvent
from app.ids import new_id
from app.pagination import Page, decode_cursor, paginate


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts, and from where: a caller over HTTP (``principal``), or ``None`` for the
    command line and the bootstrap key at start-up (``via`` says which)."""

    principal: Principal | None
    address: str | None = None
    request_id: str | None = None
    via: str = "http"


CLI = Actor(None, via="cli")
START_UP = Actor(None, via="bootstrap")


def record(
    session: AsyncSession,
    actor: Actor,
    action: str,
    target_type: str,
    target_id: str,
    tenant_id: str | None,
    **details: Any,
) -> None:
    """Add the event to the session; it is committed with the change it records."""
    principal = actor.principal
    session.add(
        AuditEvent(
            id=new_id("aud"),
            tenant_id=tenant_id,
            actor_key_id=principal.key_id if principal else None,
            actor_tenant_id=principal.tenant_id if principal else None,
            via=actor.via,
            action=action,
            target_type=target_type,
            target_id=target_id,
            client_address=actor.address,
            request_id=actor.request_id,
            details=details,
        )
    )


async def list_events(
    session: AsyncSession, tenant_id: str | None, limit: int, cursor: str | None
) -> Page[AuditEvent]:
    """Events, newest first: of one tenant, or of all (``None``, an operator's view)."""
    query = select(AuditEvent)
    if tenant_id is not None:
        query = query.where(AuditEvent.tenant_id == tenant_id)
    if cursor is not None:
        query = query.where(AuditEvent.id < decode_cursor(cursor))
    rows = (await session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit + 1))).all()
    return paginate(rows, limit, key=lambda row: row.id)
