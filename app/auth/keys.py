"""API keys: made here, shown once, stored only as a SHA-256 hash; and checked on each request.

A key is ``cg_`` followed by 43 URL-safe characters (256 random bits). Its first 12 characters
are kept in clear as the prefix that people use to tell keys apart. A high-entropy secret needs
no slow hash: SHA-256 is enough, and lookups stay one indexed query.

Keys are checked where they are changed. Every change of a key (made, disabled, revoked,
rotated, its scopes) bumps ``auth_version`` in the change's own transaction, whichever process
or command makes it. A process remembers what it read about a key together with the version
it read it at, and on each request reads the version again (one indexed row: on SQLite read at
once, elsewhere one read shared by the requests that arrive while it runs): an entry of an
older version is read again. So a changed key is seen on the very next request by every
process, and an unchanged one costs one small read. Expiry and a rotation's grace period are
times kept with the entry, compared with the clock on each request: they need no change to be
published.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cachetools import LRUCache
from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.auth import audit
from app.auth.budgets import Budget
from app.auth.scopes import ALL_SCOPES, TENANT_SCOPES
from app.auth.scopes import Principal as Principal  # where the rest of app imports it
from app.db.models import DEFAULT_TENANT_ID, ApiKey, AuthVersion, Tenant, utcnow
from app.db.scalar import ScalarReader, sql_of
from app.errors import ErrorCode, NotFound
from app.ids import new_id

# A session factory (``async_sessionmaker``): what authentication reads, it reads in a session
# of its own, opened only when the cache does not know the answer.
Sessions = Callable[[], AsyncSession]

KEY_PREFIX = "cg_"
PREFIX_LENGTH = 12
_MAX_KEY_LENGTH = 256


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def bump_version(session: AsyncSession) -> None:
    """Tell every process that a key changed: in the transaction that changes it."""
    await session.execute(
        update(AuthVersion).where(AuthVersion.id == 1).values(version=AuthVersion.version + 1)
    )


async def tenant_by_name(session: AsyncSession, name: str) -> Tenant:
    """The tenant with that name, created if it does not exist yet."""
    tenant = await session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(id=new_id("ten"), name=name)
        session.add(tenant)
        await session.flush()
    return tenant


def new_key_row(
    tenant_id: str,
    scopes: Iterable[str],
    *,
    name: str | None = None,
    expires_at: datetime | None = None,
    key: str | None = None,
) -> tuple[ApiKey, str]:
    """A key's row (not yet added to a session) and its secret, which is shown once."""
    key = key or generate_key()
    row = ApiKey(
        id=new_id("key"),
        tenant_id=tenant_id,
        prefix=key[:PREFIX_LENGTH],
        key_hash=hash_key(key),
        name=name,
        scopes=sorted({str(scope) for scope in scopes}),
        status="active",
        expires_at=expires_at,
    )
    return row, key


async def create_key(
    session: AsyncSession,
    tenant_name: str,
    key: str | None = None,
    scopes: Iterable[str] = TENANT_SCOPES,
    name: str | None = None,
    actor: audit.Actor = audit.CLI,
) -> tuple[ApiKey, str]:
    """A new key for the tenant (created if new). Returns the row and the key, shown once."""
    tenant = await tenant_by_name(session, tenant_name)
    row, key = new_key_row(tenant.id, scopes, name=name, key=key)
    session.add(row)
    audit.record(session, actor, "api_key.created", "api_key", row.id, tenant.id, **key_fields(row))
    await bump_version(session)
    await session.commit()
    return row, key


async def ensure_key(session: AsyncSession, tenant_name: str, key: str) -> ApiKey:
    """Make sure the given key exists (the bootstrap key of a deployment), with every scope.

    Replicas starting together may race to create it: the loser reads the winner's row. A
    bootstrap key made before scopes existed gets them all; one revoked stays revoked.
    """
    query = select(ApiKey).where(ApiKey.key_hash == hash_key(key))
    existing = await session.scalar(query)
    if existing is not None:
        if existing.revoked_at is None and set(existing.scopes) != ALL_SCOPES:
            existing.scopes = sorted(ALL_SCOPES)
            audit.record(
                session,
                audit.START_UP,
                "api_key.updated",
                "api_key",
                existing.id,
                existing.tenant_id,
                scopes=existing.scopes,
            )
            await bump_version(session)
            await session.commit()
        return existing
    try:
        row, _ = await create_key(
            session, tenant_name, key, ALL_SCOPES, "bootstrap", actor=audit.START_UP
        )
    except IntegrityError:
        await session.rollback()
        row = (await session.scalars(query)).one()
    return row


async def list_keys(session: AsyncSession) -> list[tuple[ApiKey, str]]:
    """Every key with its tenant's name, oldest first."""
    query = select(ApiKey, Tenant.name).join(Tenant).order_by(ApiKey.id)
    return [(key, name) for key, name in (await session.execute(query)).all()]


async def revoke_key(session: AsyncSession, key_id: str, actor: audit.Actor = audit.CLI) -> ApiKey:
    """Revoke a key for good (its previous secret too); revoking it again changes nothing."""
    row = await session.get(ApiKey, key_id)
    if row is None:
        raise NotFound(f"No API key with id {key_id!r}.", code=ErrorCode.API_KEY_NOT_FOUND)
    if row.revoked_at is None:
        row.revoked_at = row.updated_at = utcnow()
        row.previous_hash = row.previous_until = None
        audit.record(session, actor, "api_key.revoked", "api_key", row.id, row.tenant_id)
        await bump_version(session)
        await session.commit()
    return row


def key_fields(row: ApiKey) -> dict[str, object]:
    """What an audit event says of a key made: what anyone may read back, never a secret."""
    return {
        "name": row.name,
        "prefix": row.prefix,
        "scopes": list(row.scopes),
        "expires_at": row.expires_at.isoformat() if row.expires_at else None,
    }


# Built once, as every request runs one: building a statement costs more than running it. On
# the table, not the entity: rows of plain columns skip the ORM's loading, which costs more again.
_keys = ApiKey.__table__.c
_tenants = Tenant.__table__.c
_ANY_KEY = select(_keys.id).limit(1)
# A key's row with its tenant's, and the budgets of both: a change of the tenant's bumps the
# version too.
_KEY_AND_TENANT = ApiKey.__table__.join(Tenant.__table__, _keys.tenant_id == _tenants.id)
_BUDGETS = (
    _keys.id,
    _keys.tenant_id,
    _keys.budget_nano_usd,
    _keys.budget_period,
    _tenants.budget_nano_usd.label("tenant_budget_nano_usd"),
    _tenants.budget_period.label("tenant_budget_period"),
)
_KEY_BY_HASH = (
    select(
        *_BUDGETS,
        _keys.key_hash,
        _keys.previous_hash,
        _keys.previous_until,
        _keys.revoked_at,
        _keys.status,
        _keys.expires_at,
        _keys.scopes,
    )
    .select_from(_KEY_AND_TENANT)
    .where(or_(_keys.key_hash == bindparam("digest"), _keys.previous_hash == bindparam("digest")))
)
_KEY_BUDGETS = select(*_BUDGETS).select_from(_KEY_AND_TENANT).where(_keys.id == bindparam("key_id"))
# The application_name of each process's connection that reads the version (PostgreSQL).
VERSION_READER = "citegate-key-version"
_VERSION = select(AuthVersion.__table__.c.version).where(AuthVersion.__table__.c.id == 1)


async def any_key_exists(session: AsyncSession) -> bool:
    """Once any key was ever made, revoked or not, the service never runs open again."""
    return await session.scalar(_ANY_KEY) is not None


@dataclass(frozen=True, slots=True)
class _Known:
    """What was read about a key, at ``version``: its principal (None: refused) until
    ``until`` (seconds since the epoch; its expiry or the end of a rotation's grace)."""

    version: int
    principal: Principal | None
    until: float | None


class KeyCache:
    """What authentication read from the database, trusted while ``auth_version`` has not
    moved: the principal behind each key, and whether any key exists. The version is read
    once per request (``current_version``), the rest only when it moved."""

    def __init__(
        self,
        engine: AsyncEngine | None = None,
        clock: Callable[[], float] = time.time,
        size: int = 10_000,
    ) -> None:
        self._version_reader: ScalarReader | None = None
        if engine is not None:
            self.bind(engine)
        self._clock = clock
        self._known: LRUCache[str, _Known] = LRUCache(size)
        self._any_key: tuple[int, bool] | None = None
        # Whether a read of the version is under way; the one that follows it, which the
        # requests that arrive while the first runs wait for; the task that makes that one.
        self._reading = False
        self._next: asyncio.Future[int] | None = None
        self._following: asyncio.Task[int] | None = None

    def bind(self, engine: AsyncEngine) -> None:
        """Read the version from this engine's database (``app.db.scalar``: directly, not
        through the engine's pool, as every request reads it)."""
        self._version_reader = ScalarReader(engine, sql_of(_VERSION), _VERSION, name=VERSION_READER)

    async def aclose(self) -> None:
        if self._version_reader is not None:
            await self._version_reader.aclose()

    async def current_version(self) -> int:
        """The version in the database as it is now: read by a query that began after this
        call did. On SQLite it is read at once. Elsewhere a request that finds no read under
        way reads it itself; those that arrive while a read runs share the next one, which
        begins when that read ends (a task, made only then: a task a request cost more CPU
        than the read)."""
        reader = self._version_reader
        assert reader is not None, "KeyCache.bind(engine) before use"
        if (version := reader.read_now()) is not None:
            return version
        if self._reading:
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            return await asyncio.shield(self._next)  # a waiter cancelled cancels no read
        self._reading = True
        try:
            return await reader.read()
        finally:
            self._read_ended()

    def _read_ended(self, _: object = None) -> None:
        self._reading, self._following = False, None
        waiting, self._next = self._next, None
        if waiting is not None:
            assert self._version_reader is not None
            self._reading = True
            following = self._following = asyncio.ensure_future(self._version_reader.read())
            following.add_done_callback(lambda done: _settle(waiting, done))
            following.add_done_callback(self._read_ended)

    async def any_key_exists(self, sessions: Sessions, version: int) -> bool:
        known = self._any_key
        if known is not None and known[0] == version:
            return known[1]
        async with sessions() as session:
            exists = await any_key_exists(session)
        self._any_key = (version, exists)
        return exists

    async def principal(self, sessions: Sessions, digest: str, version: int) -> Principal | None:
        """The principal behind the key with this SHA-256 digest at this version; None when
        unknown, disabled, revoked, expired or rotated out. A session of ``sessions`` is opened
        only when the cache holds nothing for the key at this version."""
        known = self._known.get(digest)
        if known is None or known.version != version:
            async with sessions() as session:
                row = (await session.execute(_KEY_BY_HASH, {"digest": digest})).first()
            known = self._known[digest] = _read(row, digest, version)
        if known.until is not None and self._clock() >= known.until:
            return None
        return known.principal


def _read(row: Any, digest: str, version: int) -> _Known:
    """What a key's row (or None) says about the secret with this digest."""
    if row is None or row.revoked_at is not None or row.status != "active":
        return _Known(version, None, None)
    ends: list[datetime | None] = [row.expires_at]
    if not hmac.compare_digest(row.key_hash, digest):  # the previous secret of a rotated key
        if row.previous_hash is None or not hmac.compare_digest(row.previous_hash, digest):
            return _Known(version, None, None)
        ends.append(row.previous_until)
    until = min((_utc(end).timestamp() for end in ends if end is not None), default=None)
    return _Known(
        version, Principal(row.tenant_id, row.id, frozenset(row.scopes), _budgets(row)), until
    )


def _budgets(row: Any) -> tuple[Budget, ...]:
    """The budgets of a key's row read with its tenant's (``_KEY_BY_HASH``, ``_KEY_BUDGETS``)."""
    return tuple(
        budget
        for budget in (
            Budget.of(row.id, row.budget_nano_usd, row.budget_period, row.tenant_id),
            Budget.of(
                row.tenant_id, row.tenant_budget_nano_usd, row.tenant_budget_period, row.tenant_id
            ),
        )
        if budget is not None
    )


async def principal_of(engine: AsyncEngine, tenant_id: str, key_id: str | None) -> Principal:
    """Who asked, with the budgets the key and its tenant have now: for work done later on
    the asker's behalf (a batch's judge calls). Scopes are not read: it is not a request."""
    if key_id is None:
        return Principal(tenant_id, None)
    async with engine.connect() as connection:
        row = (await connection.execute(_KEY_BUDGETS, {"key_id": key_id})).first()
    return Principal(tenant_id, key_id, budgets=() if row is None else _budgets(row))


def _utc(moment: datetime) -> datetime:
    # Read through the table, not the entity: SQLite's naive datetimes are UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _settle(future: asyncio.Future[int], task: asyncio.Future[int]) -> None:
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif (error := task.exception()) is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


async def authenticate(
    sessions: Sessions, presented: str | None, cache: KeyCache
) -> Principal | None:
    """The principal behind the Authorization header's key, or None when it must be refused.

    ``presented`` is None when no Authorization header came: allowed only while no key exists.
    """
    version = await cache.current_version()
    if presented is None:
        if await cache.any_key_exists(sessions, version):
            return None
        return Principal(DEFAULT_TENANT_ID, None)
    if not presented or len(presented) > _MAX_KEY_LENGTH:
        return None
    return await cache.principal(sessions, hash_key(presented), version)
