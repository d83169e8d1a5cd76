"""What a key may do: its scopes, and the scope each route needs.

``read``: documents, answers, search (every GET, and the POSTs that only read). ``write``:
upload, delete, ask, batches (every other POST, and PATCH and DELETE). ``admin``: the keys,
reports and audit events of the key's own tenant (``/v1/admin/...``). ``operator``: tenants,
and every tenant's keys and reports. ``operator`` includes ``admin``; neither includes
``read`` or ``write``.

The rule is by route, not by handler, so that a new route gets a scope without anyone
remembering to give it one: tests/e2e/test_scopes.py walks the OpenAPI document and checks
that each route refuses a key without its scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.auth.budgets import Budget


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    OPERATOR = "operator"


ALL_SCOPES = frozenset(Scope)
# Keys made before scopes existed (migration 0017), and by `citegate keys create` by default:
# everything over their own tenant.
TENANT_SCOPES = frozenset({Scope.READ, Scope.WRITE, Scope.ADMIN})
# The one caller while the service runs open (no key yet): never an administrator.
OPEN_SCOPES = frozenset({Scope.READ, Scope.WRITE})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, through a key (or none while the service runs open), with
    what the key may do and the budgets its upstream calls spend (the key's, its tenant's;
    none: no budget is looked at)."""

    tenant_id: str
    key_id: str | None
    scopes: frozenset[str] = OPEN_SCOPES
    budgets: tuple[Budget, ...] = ()


# POSTs that only read: searching, and counting an answer's tokens.
_READING_POSTS = frozenset(
    {
        "/v1/search",
        "/v1/answers/count-tokens",
        "/anthropic/v1/messages/count_tokens",
        "/openai/v1/vector_stores/{vector_store_id}/search",
    }
)
_READING_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def required_scope(method: str, path: str) -> Scope:
    """The scope a route needs: ``path`` is the route's template (``/v1/documents/{id}``)."""
    if path.startswith("/v1/admin/tenants"):
        return Scope.OPERATOR
    if path.startswith("/v1/admin/"):
        return Scope.ADMIN
    if method in _READING_METHODS or path in _READING_POSTS:
        return Scope.READ
    return Scope.WRITE


def allows(scopes: frozenset[str], needed: str) -> bool:
    """Whether keys with ``scopes`` may do what needs ``needed``."""
    return needed in scopes or (needed == Scope.ADMIN and Scope.OPERATOR in scopes)
