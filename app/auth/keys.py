"""API keys: made here, shown once, stored only as a SHA-256 hash.

A key is ``cg_`` followed by 43 URL-safe characters (256 random bits). Its first 12 characters
are kept in clear as the prefix that people use to tell keys apart. A high-entropy secret needs
no slow hash: SHA-256 is enough, and lookups stay one indexed query.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache
from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import DEFAULT_TENANT_ID, ApiKey, Tenant, utcnow
from app.errors import ErrorCode, NotFound
from app.ids import new_id

# A session factory (``async_sessionmaker``): what authentication reads, it reads in a session
# of its own, opened only when the cache does not know the answer.
Sessions = Callable[[], AsyncSession]

KEY_PREFIX = "cg_"
PREFIX_LENGTH = 12
_MAX_KEY_LENGTH = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, through a key (or none while the service runs open)."""

    tenant_id: str
    key_id: str | None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def tenant_by_name(session: AsyncSession, name: str) -> Tenant:
    """The tenant with that name, created if it does not exist yet."""
    tenant = await session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(id=new_id("ten"), name=name)
        session.add(tenant)
        await session.flush()
    return tenant


async def create_key(
    session: AsyncSession, tenant_name: str, key: str | None = None
) -> tuple[ApiKey, str]:
    """A new key for the tenant (created if new). Returns the row and the key, shown once."""
    key = key or generate_key()
    tenant = await tenant_by_name(session, tenant_name)
    row = ApiKey(
        id=new_id("key"), tenant_id=tenant.id, prefix=key[:PREFIX_LENGTH], key_hash=hash_key(key)
    )
    session.add(row)
    await session.commit()
    return row, key


async def ensure_key(session: AsyncSession, tenant_name: str, key: str) -> ApiKey:
    """Make sure the given key exists (the bootstrap key of a deployment).

    Replicas starting together may race to create it: the loser reads the winner's row.
    """
    query = select(ApiKey).where(ApiKey.key_hash == hash_key(key))
    existing = await session.scalar(query)
    if existing is not None:
        return existing
    try:
        row, _ = await create_key(session, tenant_name, key)
    except IntegrityError:
        await session.rollback()
        row = (await session.scalars(query)).one()
    return row


async def list_keys(session: AsyncSession) -> list[tuple[ApiKey, str]]:
    """Every key with its tenant's name, oldest first."""
    query = select(ApiKey, Tenant.name).join(Tenant).order_by(ApiKey.id)
    return [(key, name) for key, name in (await session.execute(query)).all()]


async def revoke_key(session: AsyncSession, key_id: str) -> ApiKey:
    row = await session.get(ApiKey, key_id)
    if row is None:
        raise NotFound(f"No API key with id {key_id!r}.", code=ErrorCode.API_KEY_NOT_FOUND)
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        await session.commit()
    return row


# Built once, as every request runs one: building a statement costs more than running it. On
# the table, not the entity: rows of plain columns skip the ORM's loading, which costs more again.
_keys = ApiKey.__table__.c
_ANY_KEY = select(_keys.id).limit(1)
_KEY_BY_HASH = select(_keys.tenant_id, _keys.id, _keys.key_hash, _keys.revoked_at).where(
    _keys.key_hash == bindparam("digest")
)


async def any_key_exists(session: AsyncSession) -> bool:
    """Once any key was ever made, revoked or not, the service never runs open again."""
    return await session.scalar(_ANY_KEY) is not None


class KeyCache:
    """What authentication read from the database, trusted for ``recheck_seconds``: the
    principal behind each valid key, and whether any key exists. Every request needs them,
    and each lookup is a turn on the database's connection (SQLite has one). A revoked key is
    refused within ``recheck_seconds`` (``citegate keys revoke`` runs in another process, so
    there is nothing to tell), and a service running open asks for keys within that long of
    the first one. Refusals are never remembered: a new key works at once.
    """

    def __init__(
        self,
        recheck_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        size: int = 10_000,
    ) -> None:
        # An entry is good while clock() < its time + recheck_seconds: with 0, never.
        self._principals: TTLCache[str, Principal] = TTLCache(size, recheck_seconds, clock)
        self._any_key: TTLCache[None, bool] = TTLCache(1, recheck_seconds, clock)

    async def any_key_exists(self, sessions: Sessions) -> bool:
        exists = self._any_key.get(None)
        if exists is None:
            async with sessions() as session:
                exists = self._any_key[None] = await any_key_exists(session)
        return exists

    async def principal(self, sessions: Sessions, digest: str) -> Principal | None:
        """The principal behind the key with this SHA-256 digest; None when unknown or revoked.
        A session of ``sessions`` is opened only when the cache does not hold the key."""
        principal = self._principals.get(digest)
        if principal is None:
            async with sessions() as session:
                row = (await session.execute(_KEY_BY_HASH, {"digest": digest})).first()
            if (
                row is None
                or not hmac.compare_digest(row.key_hash, digest)
                or row.revoked_at is not None
            ):
                return None
            principal = self._principals[digest] = Principal(row.tenant_id, row.id)
        return principal


async def authenticate(
    sessions: Sessions, presented: str | None, cache: KeyCache
) -> Principal | None:
    """The principal behind the Authorization header's key, or None when it must be refused.

    ``presented`` is None when no Authorization header came: allowed only while no key exists.
    """
    if presented is None:
        if await cache.any_key_exists(sessions):
            return None
        return Principal(DEFAULT_TENANT_ID, None)
    if not presented or len(presented) > _MAX_KEY_LENGTH:
        return None
    return await cache.principal(sessions, hash_key(presented))
