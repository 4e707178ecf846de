"""Who a caller is: the tenant and role its API key stands for (HTTP and WebSocket alike, and the operator CLI's
`--api-key`), checked in constant time. Bootstrap keys (RESPONSES_API_KEYS) are known here; the keys kept in the
database are looked up through a `KeyLookup` (app/keys/cache.py: the repository behind a short per-node cache).
One tenant on an open server (no bootstrap key and no key in the database).

The `OpenAI-Project` header (what the SDK's `project=` sends) chooses the project a request acts on: an admin key may
name any project (the console across projects), any other key only its own (else a 403)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from app.config import Settings
from app.errors import NotFound, PermissionDenied, Unauthorized

OPEN_TENANT = "public"
#: The header naming the project a request acts on (by id), as the openai SDK's `project=` sends it.
PROJECT_HEADER = "openai-project"
#: The longest project id looked up (ids are shorter: a longer one is unknown without a query).
MAX_PROJECT_ID_CHARS = 64
TENANT_PROJECT_PREFIX = "project:"

#: admin: everything, /metrics and the key API included; member: read and write its project's data;
#: read: GET only.
Role = Literal["admin", "member", "read"]
ROLES: tuple[Role, ...] = get_args(Role)


def as_role(value: str) -> Role | None:
    """A stored role, or None for one this server does not know."""
    return next((role for role in ROLES if role == value), None)


#: The methods a `read` key may use.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Identity:
    """A caller: whose data it reads and writes (`tenant`) and what it may do (`role`)."""

    tenant: str
    role: Role
    #: The database key's id; None for a bootstrap key and on an open server.
    key_id: str | None = None
    #: False on an open server: nobody is authenticated (the key API then refuses everyone).
    authenticated: bool = True

    def require_write(self) -> None:
        """A 403 for a `read` key."""
        if self.role == "read":
            raise PermissionDenied(
                "This API key has the 'read' role: it may only read (GET). Use a 'member' or 'admin' key to write.",
                code="permission_denied",
            )

    def require_admin(self) -> None:
        """A 403 for any key that is not an admin's (and for everyone on an open server)."""
        if self.role != "admin" or not self.authenticated:
            reason = "an 'admin' API key" if self.authenticated else "an admin key; this server has none yet"
            raise PermissionDenied(f"This needs {reason}.", code="permission_denied")


OPEN_IDENTITY = Identity(tenant=OPEN_TENANT, role="admin", authenticated=False)


class KeyLookup(Protocol):
    """The keys kept in the database, as an API node sees them (perhaps a few seconds late)."""

    async def find(self, key_hash: str) -> Identity | None:
        """The identity of the key with this SHA-256 hash; None when there is none or it is revoked."""
        ...

    async def any_keys(self) -> bool:
        """Whether the database holds any key (a revoked one included)."""
        ...

    async def project_exists(self, project_id: str) -> bool:
        """Whether a project with this id exists."""
        ...


class Authenticator:
    """Turns an Authorization header into an Identity, or a 401."""

    def __init__(self, settings: Settings, lookup: KeyLookup | None = None) -> None:
        self._bootstrap = [key.encode() for key in settings.api_keys]
        self._lookup = lookup

    async def identify(self, authorization: str, project: str | None = None) -> Identity:
        """The caller of a request with this Authorization header (and OpenAI-Project header, `project`): a
        bootstrap key is an admin of its own tenant ("key:" + hash, as before projects existed); a database key is
        its project's, with its role; an admin naming a project acts on that project's data."""
        identity = await self._identify_key(authorization)
        if project is None or not project.strip():
            return identity
        return await self._for_project(identity, project.strip())

    async def _for_project(self, identity: Identity, project_id: str) -> Identity:
        """The identity acting on `project_id`: the same for the key's own project, that project's tenant (with the
        same role and key) for an admin, a 403 for anyone else, a 404 for a project that does not exist."""
        # NOTE: an open server has no projects (a project comes with its first key, which keys the server): the
        # header is ignored there, so a client with OPENAI_PROJECT_ID set in its environment still works.
        if not identity.authenticated or identity.tenant == tenant_of_project(project_id):
            return identity
        if identity.role != "admin":
            raise PermissionDenied(
                "The OpenAI-Project header names a project this API key does not belong to; only an 'admin' key "
                "may act on another project.",
                code="mismatched_project",
            )
        if (
            len(project_id) > MAX_PROJECT_ID_CHARS
            or self._lookup is None
            or not await self._lookup.project_exists(project_id)
        ):
            raise NotFound(
                f"Project '{project_id[:MAX_PROJECT_ID_CHARS]}' (OpenAI-Project header) not found.",
                code="project_not_found",
            )
        return Identity(tenant=tenant_of_project(project_id), role=identity.role, key_id=identity.key_id)

    async def _identify_key(self, authorization: str) -> Identity:
        if not self._bootstrap and (self._lookup is None or not await self._lookup.any_keys()):
            return OPEN_IDENTITY
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized(
                "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.",
                code="missing_api_key",
            )
        sent = key_bytes(key.strip())
        # Every bootstrap key is compared, in constant time, whether or not an earlier one matched.
        matched = [hmac.compare_digest(sent, known) for known in self._bootstrap]
        if any(matched):
            return Identity(tenant=tenant_of_key(sent), role="admin")
        if self._lookup is not None:
            identity = await self._lookup.find(hash_key(sent))
            if identity is not None:
                return identity
        raise Unauthorized("Incorrect API key provided.", code="invalid_api_key")


def tenant_of_key(key: bytes) -> str:
    """The tenant a bootstrap API key stands for (a hash: the key itself is never stored)."""
    return "key:" + hashlib.sha256(key).hexdigest()[:32]


def tenant_of_project(project_id: str) -> str:
    """The tenant every key of a project shares."""
    return TENANT_PROJECT_PREFIX + project_id


def project_of_tenant(tenant: str) -> str | None:
    """The project id a tenant stands for; None for a bootstrap key's tenant and an open server's."""
    return tenant.removeprefix(TENANT_PROJECT_PREFIX) if tenant.startswith(TENANT_PROJECT_PREFIX) else None


def hash_key(key: bytes) -> str:
    """What the database keeps of a key: its SHA-256, hex (a key has 256 random bits: no salt or stretching
    needed)."""
    return hashlib.sha256(key).hexdigest()


def key_bytes(key: str) -> bytes:
    """The key as the client sent it: HTTP headers arrive decoded as Latin-1, so encoding them back gives the raw
    (UTF-8) bytes; compare_digest takes str only when it is ASCII, hence bytes."""
    try:
        return key.encode("latin-1")
    except UnicodeEncodeError:  # not from an HTTP header (a test, say): already the text itself
        return key.encode("utf-8", "surrogatepass")
