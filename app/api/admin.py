"""The administration routes: tenants (``operator``) and API keys (``admin`` of the tenant, or
``operator``). The scope each needs is checked with the key (``app.auth.scopes``); what a
caller may see of which tenant, by the service (``app.auth.admin``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, status
from pydantic import AwareDatetime

from app.api.deps import (
    DEFAULT_LIMIT,
    LimitQuery,
    PageCursorDep,
    PrincipalDep,
    SessionDep,
)
from app.api.problems import AUTH_PROBLEMS, BODY_PROBLEMS, problems
from app.auth import admin
from app.auth.audit import Actor
from app.auth.budgets import Setting, setting_of, shown
from app.auth.schemas import (
    ApiKeyOut,
    ApiKeyPage,
    ApiKeyWithSecret,
    AuditEventOut,
    AuditEventPage,
    Budget,
    CreateApiKeyRequest,
    CreateTenantRequest,
    RotateApiKeyRequest,
    TenantOut,
    TenantPage,
    UpdateApiKeyRequest,
    UpdateTenantRequest,
)
from app.db.models import ApiKey, Tenant, utcnow
from app.ids import NO_NUL
from app.usage import service as usage
from app.usage.prices import Prices
from app.usage.schemas import (
    CostBucket,
    CostReport,
    CostResult,
    UsageBucket,
    UsageReport,
    UsageResult,
)

TenantId = Annotated[str, Path(pattern=NO_NUL, description="The tenant's id, `ten_…`.")]
KeyId = Annotated[str, Path(pattern=NO_NUL, description="The API key's id, `key_…`.")]
TenantQuery = Annotated[
    str | None,
    Query(max_length=100, pattern=NO_NUL, description="Only this tenant's (operator: any)."),
]


async def _actor(request: Request, principal: PrincipalDep) -> Actor:
    """The caller, and from where: for the audit events of what it does."""
    address = request.client.host if request.client else None
    return Actor(principal, address, getattr(request.state, "request_id", None))


ActorDep = Annotated[Actor, Depends(_actor)]

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=problems(*AUTH_PROBLEMS))


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        id=tenant.id,
        name=tenant.name,
        created_at=tenant.created_at,
        budget=_budget_out(tenant.budget_nano_usd, tenant.budget_period),
    )


def _budget_out(nano: int | None, period: str | None) -> Budget | None:
    budget = shown(nano, period)
    return None if budget is None else Budget(**budget)


def _setting(budget: Budget | None) -> Setting:
    return None if budget is None else setting_of(budget.usd, budget.period)


def key_out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(**_key_fields(key))


def _key_fields(key: ApiKey) -> dict[str, object]:
    return {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "name": key.name,
        "prefix": key.prefix,
        "scopes": sorted(key.scopes),
        "status": admin.key_status(key),
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
        "previous_secret_expires_at": key.previous_until if key.previous_hash else None,
        "budget": _budget_out(key.budget_nano_usd, key.budget_period),
    }


@router.post(
    "/tenants",
    operation_id="createTenant",
    summary="Create a tenant",
    status_code=status.HTTP_201_CREATED,
    response_model=TenantOut,
    responses=problems(*BODY_PROBLEMS, 409),
)
async def create_tenant(
    body: CreateTenantRequest, session: SessionDep, actor: ActorDep
) -> TenantOut:
    return tenant_out(await admin.create_tenant(session, actor, body.name, _setting(body.budget)))


@router.get(
    "/tenants",
    operation_id="listTenants",
    summary="List tenants, oldest first",
    response_model=TenantPage,
    responses=problems(422),
)
async def list_tenants(
    session: SessionDep, cursor: PageCursorDep, limit: LimitQuery = DEFAULT_LIMIT
) -> TenantPage:
    page = await admin.list_tenants(session, limit, cursor.value)
    return TenantPage(
        data=[tenant_out(t) for t in page.items], next_cursor=cursor.next(page.next_cursor)
    )


@router.get(
    "/tenants/{tenant_id}",
    operation_id="getTenant",
    summary="Get a tenant",
    response_model=TenantOut,
    responses=problems(404, 422),
)
async def get_tenant(tenant_id: TenantId, session: SessionDep, actor: ActorDep) -> TenantOut:
    return tenant_out(await admin.get_tenant(session, actor, tenant_id))


@router.patch(
    "/tenants/{tenant_id}",
    operation_id="updateTenant",
    summary="Rename a tenant, or set its budget",
    response_model=TenantOut,
    responses=problems(*BODY_PROBLEMS, 404, 409),
)
async def update_tenant(
    tenant_id: TenantId, body: UpdateTenantRequest, session: SessionDep, actor: ActorDep
) -> TenantOut:
    tenant = await admin.update_tenant(
        session,
        actor,
        tenant_id,
        body.name,
        budget=_setting(body.budget),
        set_budget="budget" in body.model_fields_set,
    )
    return tenant_out(tenant)


@router.post(
    "/api-keys",
    operation_id="createApiKey",
    summary="Create an API key (its secret is shown once)",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyWithSecret,
    responses=problems(*BODY_PROBLEMS, 403, 404),
)
async def create_api_key(
    body: CreateApiKeyRequest, session: SessionDep, actor: ActorDep
) -> ApiKeyWithSecret:
    key, secret = await admin.create_api_key(
        session,
        actor,
        body.tenant_id,
        body.name,
        body.scopes,
        body.expires_at,
        _setting(body.budget),
    )
    return ApiKeyWithSecret(**_key_fields(key), secret=secret)


@router.get(
    "/api-keys",
    operation_id="listApiKeys",
    summary="List API keys, newest first",
    response_model=ApiKeyPage,
    responses=problems(404, 422),
)
async def list_api_keys(
    session: SessionDep,
    actor: ActorDep,
    cursor: PageCursorDep,
    tenant_id: TenantQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> ApiKeyPage:
    page = await admin.list_api_keys(session, actor, tenant_id, limit, cursor.value)
    return ApiKeyPage(
        data=[key_out(k) for k in page.items], next_cursor=cursor.next(page.next_cursor)
    )


@router.get(
    "/api-keys/{key_id}",
    operation_id="getApiKey",
    summary="Get an API key",
    response_model=ApiKeyOut,
    responses=problems(404, 422),
)
async def get_api_key(key_id: KeyId, session: SessionDep, actor: ActorDep) -> ApiKeyOut:
    return key_out(await admin.get_api_key(session, actor, key_id))


@router.patch(
    "/api-keys/{key_id}",
    operation_id="updateApiKey",
    summary="Rename, rescope, disable or enable an API key, or set its budget",
    response_model=ApiKeyOut,
    responses=problems(*BODY_PROBLEMS, 403, 404, 409),
)
async def update_api_key(
    key_id: KeyId, body: UpdateApiKeyRequest, session: SessionDep, actor: ActorDep
) -> ApiKeyOut:
    key, _ = await admin.update_api_key(
        session,
        actor,
        key_id,
        name=body.name,
        scopes=body.scopes,
        status=body.status,
        budget=_setting(body.budget),
        set_budget="budget" in body.model_fields_set,
    )
    return key_out(key)


@router.delete(
    "/api-keys/{key_id}",
    operation_id="revokeApiKey",
    summary="Revoke an API key, for good",
    response_model=ApiKeyOut,
    responses=problems(404, 422),
)
async def revoke_api_key(key_id: KeyId, session: SessionDep, actor: ActorDep) -> ApiKeyOut:
    return key_out(await admin.revoke_api_key(session, actor, key_id))


@router.post(
    "/api-keys/{key_id}/rotate",
    operation_id="rotateApiKey",
    summary="Give an API key a new secret; the old one works for a grace period",
    response_model=ApiKeyWithSecret,
    responses=problems(*BODY_PROBLEMS, 404, 409),
)
async def rotate_api_key(
    key_id: KeyId, body: RotateApiKeyRequest, session: SessionDep, actor: ActorDep
) -> ApiKeyWithSecret:
    key, secret = await admin.rotate_api_key(session, actor, key_id, body.grace_seconds)
    return ApiKeyWithSecret(**_key_fields(key), secret=secret)


@router.get(
    "/audit-events",
    operation_id="listAuditEvents",
    summary="List audit events, newest first",
    response_model=AuditEventPage,
    responses=problems(404, 422),
)
async def list_audit_events(
    session: SessionDep,
    actor: ActorDep,
    cursor: PageCursorDep,
    tenant_id: TenantQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> AuditEventPage:
    page = await admin.list_audit_events(session, actor, tenant_id, limit, cursor.value)
    return AuditEventPage(
        data=[AuditEventOut.model_validate(e, from_attributes=True) for e in page.items],
        next_cursor=cursor.next(page.next_cursor),
    )


_GROUPS = "tenant_id|api_key_id|model"
StartingAt = Annotated[
    AwareDatetime, Query(description="The first moment counted (RFC 3339, with its offset).")
]
EndingAt = Annotated[
    AwareDatetime | None, Query(description="The first moment not counted; by default now.")
]
BucketWidthQuery = Annotated[
    usage.BucketWidth, Query(description="`1h` or `1d`: buckets aligned to UTC hours or days.")
]
GroupByQuery = Annotated[
    str | None,
    Query(
        pattern=rf"^({_GROUPS})(,({_GROUPS}))*$",
        description="Comma-separated: `tenant_id`, `api_key_id`, `model`. None: one group.",
    ),
]


async def _prices(request: Request) -> Prices:
    prices: Prices = request.app.state.prices
    return prices


PricesDep = Annotated[Prices, Depends(_prices)]


async def _buckets(
    session: SessionDep,
    actor: ActorDep,
    prices: PricesDep,
    starting_at: StartingAt,
    ending_at: EndingAt = None,
    bucket_width: BucketWidthQuery = "1d",
    group_by: GroupByQuery = None,
    tenant_id: TenantQuery = None,
) -> list[usage.Bucket]:
    shown = await admin.reported_tenant(session, actor, tenant_id)
    groups = [name for name in (group_by or "").split(",") if name]
    return await usage.report(
        session,
        prices,
        shown,
        starting_at,
        ending_at or utcnow(),
        bucket_width,
        groups,  # type: ignore[arg-type]  # checked by the pattern
    )


BucketsDep = Annotated[list[usage.Bucket], Depends(_buckets)]


@router.get(
    "/usage",
    operation_id="getUsageReport",
    summary="Usage per time bucket, grouped",
    response_model=UsageReport,
    responses=problems(404, 422),
)
async def get_usage_report(buckets: BucketsDep) -> UsageReport:
    return UsageReport(
        data=[
            UsageBucket(
                starting_at=bucket.starting_at,
                ending_at=bucket.ending_at,
                results=[
                    UsageResult(
                        **group.key,
                        requests=group.requests,
                        batch_requests=group.batch_requests,
                        **group.tokens,
                    )
                    for group in bucket.groups
                ],
            )
            for bucket in buckets
        ]
    )


@router.get(
    "/costs",
    operation_id="getCostReport",
    summary="Cost per time bucket, grouped (USD as decimal strings; batch discount applied)",
    response_model=CostReport,
    responses=problems(404, 422),
)
async def get_cost_report(buckets: BucketsDep, prices: PricesDep) -> CostReport:
    return CostReport(
        data=[
            CostBucket(
                starting_at=bucket.starting_at,
                ending_at=bucket.ending_at,
                results=[
                    CostResult(**group.key, amount=_decimal(group.cost)) for group in bucket.groups
                ],
            )
            for bucket in buckets
        ],
        price_table_version=prices.version,
    )


def _decimal(amount: Decimal) -> str:
    """An exact amount as a plain decimal string: ``0.1548``, ``0``."""
    return format(amount.normalize(), "f")
