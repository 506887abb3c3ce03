"""Who may read ``/metrics``: the API server decides, as for controller-runtime's secure metrics.

controller-runtime's ``filters.WithAuthenticationAndAuthorization`` (pkg/metrics/filters) delegates both
questions to the API server, and so does :class:`DelegatedAuth`:

* **authentication**: the request's ``Authorization: Bearer <token>`` is sent in a ``TokenReview``
  (``authentication.k8s.io/v1``, no audiences: the API server's own). No token, or a token the API server
  does not authenticate, is *unauthenticated* (401); anonymous requests are never let through.
* **authorization**: the reviewed user (name, uid, groups, extra) is sent in a ``SubjectAccessReview``
  (``authorization.k8s.io/v1``) for the non-resource URL ``path`` and the request's verb (``get``) — what
  the chart's ``<fullname>-metrics-reader`` ClusterRole grants. Not allowed is *forbidden* (403).
* an API error (after the client's own retries) is neither: the caller answers 500 and caches nothing.

Results are cached with controller-runtime's lifetimes: a token's review **1 minute** (its
``CacheTTL``, for an authenticated and an unauthenticated token alike), an allowed decision **5 minutes**
and a denied one **30 seconds** (``AllowCacheTTL``/``DenyCacheTTL``). Why: a Prometheus scraping every
15-30 s per target would otherwise cost two reviews per scrape on every API server; a short deny lifetime
lets a newly created RoleBinding take effect within half a minute, and a revoked one stops a reader
within 5 minutes (the cost of caching allows; the same bound as controller-runtime's). Tokens are kept
only as SHA-256 digests, and each cache holds at most :data:`MAX_ENTRIES` entries (expired ones are
dropped first, then the oldest), so random tokens cannot grow the process.

The caching decision (:class:`TtlCache`) is pure (the clock is passed in); :class:`DelegatedAuth` is the
thin step that asks the API server.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from gpustack_worker.runtime.resources import Resource

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from gpustack_worker.runtime.client import Client

__all__ = (
    "ALLOW_TTL",
    "AUTHN_TTL",
    "DENY_TTL",
    "MAX_ENTRIES",
    "SUBJECT_ACCESS_REVIEW",
    "TOKEN_REVIEW",
    "DelegatedAuth",
    "TtlCache",
    "User",
    "bearer_token",
)

TOKEN_REVIEW: Final = Resource("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEW: Final = Resource(
    "authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False
)

#: controller-runtime's lifetimes (pkg/metrics/filters/filters.go), in seconds.
AUTHN_TTL: Final = 60.0
ALLOW_TTL: Final = 300.0
DENY_TTL: Final = 30.0
#: Entries each cache keeps at most.
MAX_ENTRIES: Final = 1024

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated user as the TokenReview's ``status.user`` names it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(slots=True)
class TtlCache(Generic[K, V]):
    """Values that expire ``ttl(value)`` seconds after they were put, at most ``limit`` of them."""

    limit: int = MAX_ENTRIES
    _entries: dict[Any, tuple[float, Any]] = field(default_factory=dict)

    def get(self, key: K, now: float) -> tuple[bool, V | None]:
        """(found, value) for ``key`` at time ``now``."""
        hit = self._entries.get(key)
        if hit is None or hit[0] <= now:
            return False, None
        value: V | None = hit[1]
        return True, value

    def put(self, key: K, value: V, ttl: float, now: float) -> None:
        self._entries.pop(key, None)
        if len(self._entries) >= self.limit:
            for stale in [k for k, (expiry, _) in self._entries.items() if expiry <= now]:
                del self._entries[stale]
        while len(self._entries) >= self.limit:
            del self._entries[next(iter(self._entries))]  # the oldest insertion
        self._entries[key] = (now + ttl, value)

    def __len__(self) -> int:
        return len(self._entries)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme is case-insensitive, as the
    API server's bearer authenticator reads it); None when absent, another scheme or empty."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _user(status: dict[str, Any]) -> User | None:
    if status.get("authenticated") is not True:
        return None
    user = status.get("user") or {}
    name = user.get("username")
    if not isinstance(name, str) or not name:
        return None
    extra = user.get("extra") or {}
    return User(
        name=name,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())),
    )


class DelegatedAuth:
    """TokenReview + SubjectAccessReview through ``client``, cached (see the module docstring).

    ``client`` must be able to create reviews whatever the process's leadership (an unfenced view:
    a review writes nothing)."""

    def __init__(self, client: Client, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._tokens: TtlCache[str, User | None] = TtlCache()
        self._decisions: TtlCache[Hashable, tuple[bool, str]] = TtlCache()
        #: Reviews sent to the API server, by kind (tests read it to see the caches work).
        self.reviews: dict[str, int] = {"TokenReview": 0, "SubjectAccessReview": 0}

    async def authenticate(self, token: str) -> User | None:
        """The user ``token`` belongs to, or None when the API server does not authenticate it.

        Raises the client's error when the API server could not be asked."""
        key = hashlib.sha256(token.encode()).hexdigest()
        found, user = self._tokens.get(key, self._clock())
        if found:
            return user
        self.reviews["TokenReview"] += 1
        answer = await self._client.create(
            TOKEN_REVIEW,
            {"apiVersion": TOKEN_REVIEW.api_version, "kind": TOKEN_REVIEW.kind, "spec": {"token": token}},
        )
        user = _user(answer.get("status") or {})
        self._tokens.put(key, user, AUTHN_TTL, self._clock())
        return user

    async def authorize(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        """(allowed, the API server's reason) for ``user`` to ``verb`` the non-resource URL ``path``."""
        key = (user, verb, path)
        found, decision = self._decisions.get(key, self._clock())
        if found and decision is not None:
            return decision
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        self.reviews["SubjectAccessReview"] += 1
        answer = await self._client.create(
            SUBJECT_ACCESS_REVIEW,
            {
                "apiVersion": SUBJECT_ACCESS_REVIEW.api_version,
                "kind": SUBJECT_ACCESS_REVIEW.kind,
                "spec": spec,
            },
        )
        status = answer.get("status") or {}
        allowed = status.get("allowed") is True and status.get("denied") is not True
        decision = (allowed, str(status.get("reason") or ""))
        self._decisions.put(key, decision, ALLOW_TTL if allowed else DENY_TTL, self._clock())
        return decision
