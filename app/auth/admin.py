"""Tenants and keys, administered: what ``/v1/admin/...`` does, for a caller (``Principal``).

An ``operator`` key administers every tenant; an ``admin`` key its own tenant only, to which
another tenant's key or tenant id is not found, exactly like one that does not exist. A
``admin`` grants any scope but ``operator``, which only an ``operator`` grants. Every change
of a key bumps the key version in the change's transaction (``app.auth.keys``), so every
process refuses a disabled, revoked or rotated-out key on its next request.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import audit
from app.auth.audit import Actor
from app.auth.budgets import Setting, shown
from app.auth.keys import (
    PREFIX_LENGTH,
    bump_version,
    generate_key,
    hash_key,
    key_fields,
    new_key_row,
    revoke_key,
)
from app.auth.scopes import Principal, Scope
from app.db.models import ApiKey, AuditEvent, Tenant, utcnow
from app.errors import Conflict, ErrorCode, Forbidden, InvalidRequest, NotFound
from app.ids import new_id
from app.pagination import Page, decode_cursor, paginate


def is_operator(actor: Principal) -> bool:
    return Scope.OPERATOR in actor.scopes


def _caller(actor: Actor) -> Principal:
    assert actor.principal is not None, "an admin action over HTTP has a caller"
    return actor.principal


def key_status(key: ApiKey, now: datetime | None = None) -> str:
    """active | disabled | revoked | expired: what the key is now."""
    now = now or utcnow()
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return key.status


# Tenants (operator only: the route's scope says so)


def _set_budget(row: Tenant | ApiKey, budget: Setting) -> None:
    row.budget_nano_usd, row.budget_period = budget if budget is not None else (None, None)


def _budget_setting(row: Tenant | ApiKey) -> Setting:
    if row.budget_nano_usd is None or row.budget_period is None:
        return None
    return row.budget_nano_usd, row.budget_period


def _budget_of(row: Tenant | ApiKey) -> dict[str, str] | None:
    return shown(row.budget_nano_usd, row.budget_period)


async def create_tenant(
    session: AsyncSession, actor: Actor, name: str, budget: Setting = None
) -> Tenant:
    tenant = Tenant(id=new_id("ten"), name=name)
    _set_budget(tenant, budget)
    session.add(tenant)
    audit.record(
        session,
        actor,
        "tenant.created",
        "tenant",
        tenant.id,
        tenant.id,
        name=name,
        budget=_budget_of(tenant),
    )
    try:
        await session.commit()
    except IntegrityError:
        await session.rollback()
        raise _name_taken(name) from None
    return tenant


async def list_tenants(session: AsyncSession, limit: int, cursor: str | None) -> Page[Tenant]:
    """Tenants, oldest first (the default tenant's id sorts before every made one)."""
    query = select(Tenant)
    if cursor is not None:
        query = query.where(Tenant.id > decode_cursor(cursor))
    rows = (await session.scalars(query.order_by(Tenant.id).limit(limit + 1))).all()
    return paginate(rows, limit, key=lambda row: row.id)


async def get_tenant(session: AsyncSession, actor: Actor, tenant_id: str) -> Tenant:
    """The tenant, if the caller administers it."""
    caller = _caller(actor)
    tenant = await session.get(Tenant, tenant_id)
    if tenant is None or not (is_operator(caller) or tenant.id == caller.tenant_id):
        raise NotFound(f"No tenant with id {tenant_id!r}.", code=ErrorCode.TENANT_NOT_FOUND)
    return tenant


async def update_tenant(
    session: AsyncSession,
    actor: Actor,
    tenant_id: str,
    name: str | None,
    *,
    budget: Setting = None,
    set_budget: bool = False,
) -> Tenant:
    """Rename a tenant, set or remove (``set_budget`` with None) its budget."""
    tenant = await get_tenant(session, actor, tenant_id)
    changed: dict[str, object] = {}
    if name is not None and name != tenant.name:
        tenant.name = changed["name"] = name
    if set_budget and budget != _budget_setting(tenant):
        _set_budget(tenant, budget)
        changed["budget"] = _budget_of(tenant)
    if changed:
        audit.record(session, actor, "tenant.updated", "tenant", tenant.id, tenant.id, **changed)
        try:
            if "budget" in changed:
                # Every process reads a tenant's budget with its keys: tell them. (Its UPDATE
                # flushes the new name first: a taken one fails here.)
                await bump_version(session)
            await session.commit()
        except IntegrityError:
            await session.rollback()
            raise _name_taken(name or "") from None  # only a new name can be taken
    return tenant


def _name_taken(name: str) -> Conflict:
    return Conflict(f"A tenant named {name!r} exists already.", code=ErrorCode.TENANT_NAME_TAKEN)


# Keys (admin of the key's tenant, or operator)


def _grantable(actor: Actor, scopes: Iterable[str]) -> list[str]:
    """The scopes, sorted, if the caller may grant them: an admin any scope of its tenant,
    only an operator ``operator``."""
    wanted = sorted({str(scope) for scope in scopes})
    if Scope.OPERATOR in wanted and not is_operator(_caller(actor)):
        raise Forbidden("Only a key with the `operator` scope can grant `operator`.")
    return wanted


async def create_api_key(
    session: AsyncSession,
    actor: Actor,
    tenant_id: str | None,
    name: str | None,
    scopes: Iterable[str],
    expires_at: datetime | None,
    budget: Setting = None,
) -> tuple[ApiKey, str]:
    """A new key of the tenant (the caller's own by default); returns it and its secret."""
    tenant = await get_tenant(session, actor, tenant_id or _caller(actor).tenant_id)
    if expires_at is not None and expires_at <= utcnow():
        raise InvalidRequest("`expires_at` is in the past.", code=ErrorCode.VALIDATION_ERROR)
    row, secret = new_key_row(
        tenant.id, _grantable(actor, scopes), name=name, expires_at=expires_at
    )
    _set_budget(row, budget)
    session.add(row)
    audit.record(
        session,
        actor,
        "api_key.created",
        "api_key",
        row.id,
        tenant.id,
        **key_fields(row),
        budget=_budget_of(row),
    )
    await bump_version(session)
    await session.commit()
    return row, secret


async def list_api_keys(
    session: AsyncSession,
    actor: Actor,
    tenant_id: str | None,
    limit: int,
    cursor: str | None,
) -> Page[ApiKey]:
    """Keys, newest first: of one tenant, or (an operator's, with no tenant) of all."""
    query = select(ApiKey)
    if tenant_id is not None:
        await get_tenant(session, actor, tenant_id)
        query = query.where(ApiKey.tenant_id == tenant_id)
    elif not is_operator(_caller(actor)):
        query = query.where(ApiKey.tenant_id == _caller(actor).tenant_id)
    if cursor is not None:
        query = query.where(ApiKey.id < decode_cursor(cursor))
    rows = (await session.scalars(query.order_by(ApiKey.id.desc()).limit(limit + 1))).all()
    return paginate(rows, limit, key=lambda row: row.id)


async def get_api_key(session: AsyncSession, actor: Actor, key_id: str) -> ApiKey:
    caller = _caller(actor)
    key = await session.get(ApiKey, key_id)
    if key is None or not (is_operator(caller) or key.tenant_id == caller.tenant_id):
        raise NotFound(f"No API key with id {key_id!r}.", code=ErrorCode.API_KEY_NOT_FOUND)
    return key


def _not_revoked(key: ApiKey) -> None:
    if key.revoked_at is not None:
        raise Conflict(f"The API key {key.id!r} is revoked.", code=ErrorCode.API_KEY_REVOKED)


async def update_api_key(
    session: AsyncSession,
    actor: Actor,
    key_id: str,
    *,
    name: str | None = None,
    scopes: Iterable[str] | None = None,
    status: str | None = None,
    budget: Setting = None,
    set_budget: bool = False,
) -> tuple[ApiKey, dict[str, object]]:
    """Rename a key, change its scopes, disable or enable it, set or remove (``set_budget``
    with None) its budget; returns it and what changed."""
    key = await get_api_key(session, actor, key_id)
    _not_revoked(key)
    changed: dict[str, object] = {}
    if name is not None and name != key.name:
        key.name = changed["name"] = name
    if scopes is not None:
        granted = _grantable(actor, scopes)
        if granted != sorted(key.scopes):
            key.scopes = granted
            changed["scopes"] = granted
    if status is not None and status != key.status:
        key.status = changed["status"] = status
    if set_budget and budget != _budget_setting(key):
        _set_budget(key, budget)
        changed["budget"] = _budget_of(key)
    if changed:
        key.updated_at = utcnow()
        audit.record(session, actor, "api_key.updated", "api_key", key.id, key.tenant_id, **changed)
        await bump_version(session)
        await session.commit()
    return key, changed


async def revoke_api_key(session: AsyncSession, actor: Actor, key_id: str) -> ApiKey:
    """Revoke a key for good (its previous secret too); revoking it again changes nothing."""
    key = await get_api_key(session, actor, key_id)
    return await revoke_key(session, key.id, actor)


async def rotate_api_key(
    session: AsyncSession, actor: Actor, key_id: str, grace_seconds: int
) -> tuple[ApiKey, str]:
    """A new secret for the key; the one it had works ``grace_seconds`` more (0: not at all).
    A secret from an earlier rotation, still in its grace, stops now."""
    key = await get_api_key(session, actor, key_id)
    _not_revoked(key)
    secret = generate_key()
    now = utcnow()
    if grace_seconds > 0:
        key.previous_hash = key.key_hash
        key.previous_until = now + timedelta(seconds=grace_seconds)
    else:
        key.previous_hash = key.previous_until = None
    key.key_hash = hash_key(secret)
    key.prefix = secret[:PREFIX_LENGTH]
    key.updated_at = now
    audit.record(
        session,
        actor,
        "api_key.rotated",
        "api_key",
        key.id,
        key.tenant_id,
        prefix=key.prefix,
        grace_seconds=grace_seconds,
        previous_secret_expires_at=key.previous_until.isoformat() if key.previous_until else None,
    )
    await bump_version(session)
    await session.commit()
    return key, secret


async def reported_tenant(session: AsyncSession, actor: Actor, tenant_id: str | None) -> str | None:
    """Whose events or usage a caller is shown: the tenant asked for, if it administers it;
    else its own, or (an operator's) every tenant's (None)."""
    if tenant_id is not None:
        return (await get_tenant(session, actor, tenant_id)).id
    if is_operator(_caller(actor)):
        return None
    return _caller(actor).tenant_id


async def list_audit_events(
    session: AsyncSession, actor: Actor, tenant_id: str | None, limit: int, cursor: str | None
) -> Page[AuditEvent]:
    """Audit events, newest first: of the caller's tenant, or (an operator's) of one tenant or
    of all."""
    shown = await reported_tenant(session, actor, tenant_id)
    return await audit.list_events(session, shown, limit, cursor)
