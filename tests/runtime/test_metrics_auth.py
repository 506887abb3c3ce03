"""Delegated authentication/authorisation of /metrics scrapes: the bearer header, the reviews sent, and the
caches' lifetimes (controller-runtime's 1 min / 5 min / 30 s) on a fake clock; API errors not cached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker.runtime.metrics_auth import (
    SUBJECT_ACCESS_REVIEW,
    TOKEN_REVIEW,
    DelegatedAuth,
    TtlCache,
    User,
    bearer_token,
)

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource


class FakeApi:
    """Answers TokenReviews from ``users`` (token → user dict) and SubjectAccessReviews from ``allowed``
    (user names); records every body; raises ``fail`` when set."""

    def __init__(self, users: dict[str, dict[str, Any]], allowed: set[str]) -> None:
        self.users, self.allowed = users, allowed
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.fail: Exception | None = None

    async def create(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((resource.kind, body))
        if self.fail is not None:
            raise self.fail
        if resource == TOKEN_REVIEW:
            user = self.users.get(body["spec"]["token"])
            return {"status": {"authenticated": True, "user": user} if user else {"authenticated": False}}
        assert resource == SUBJECT_ACCESS_REVIEW
        ok = body["spec"]["user"] in self.allowed
        return {"status": {"allowed": ok, "reason": "RBAC: allowed" if ok else ""}}


#: controller-runtime's lifetimes (pkg/metrics/filters/filters.go): CacheTTL, AllowCacheTTL, DenyCacheTTL.
AUTHN_TTL, ALLOW_TTL, DENY_TTL = 60.0, 300.0, 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SA = {
    "username": "system:serviceaccount:monitoring:prometheus",
    "uid": "u-1",
    "groups": ["system:serviceaccounts", "system:authenticated"],
    "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]},
}


def auth(
    users: dict[str, dict[str, Any]] | None = None, allowed: set[str] | None = None
) -> tuple[DelegatedAuth, FakeApi, Clock]:
    api = FakeApi(
        users if users is not None else {"good": SA}, allowed if allowed is not None else {SA["username"]}
    )
    clock = Clock()
    return DelegatedAuth(api, clock=clock), api, clock  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        ("Basic YWJjOmRlZg==", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("", None),
        (None, None),
        ("abc", None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


async def test_a_token_is_reviewed_once_per_minute_and_its_user_asked_about_get_metrics() -> None:
    delegated, api, clock = auth()
    user = await delegated.authenticate("good")
    assert user == User(
        name=SA["username"],
        uid="u-1",
        groups=("system:serviceaccounts", "system:authenticated"),
        extra=(("authentication.kubernetes.io/pod-name", ("prom-0",)),),
    )
    assert api.sent[0] == (
        "TokenReview",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "good"}},
    )
    assert await delegated.authorize(user, "get", "/metrics") == (True, "RBAC: allowed")
    assert api.sent[1] == (
        "SubjectAccessReview",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": SA["username"],
                "uid": "u-1",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]},
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
            },
        },
    )
    clock.now += AUTHN_TTL - 1
    assert await delegated.authenticate("good") == user
    assert await delegated.authorize(user, "get", "/metrics") == (True, "RBAC: allowed")
    assert delegated.reviews == {"TokenReview": 1, "SubjectAccessReview": 1}
    clock.now += 1
    assert await delegated.authenticate("good") == user
    assert delegated.reviews["TokenReview"] == 2


async def test_an_unknown_token_is_unauthenticated_and_cached_a_minute_too() -> None:
    delegated, api, clock = auth()
    assert await delegated.authenticate("bad") is None
    api.users["bad"] = SA  # the API server would now say yes: the cached no holds for AUTHN_TTL
    clock.now += AUTHN_TTL - 1
    assert await delegated.authenticate("bad") is None
    clock.now += 1
    assert await delegated.authenticate("bad") is not None
    assert delegated.reviews["TokenReview"] == 2


@pytest.mark.parametrize(
    ("allowed_at_first", "ttl"),
    [(True, ALLOW_TTL), (False, DENY_TTL)],
)
async def test_decisions_are_cached_five_minutes_when_allowed_thirty_seconds_when_denied(
    allowed_at_first: bool, ttl: float
) -> None:
    delegated, api, clock = auth(allowed={SA["username"]} if allowed_at_first else set())
    user = await delegated.authenticate("good")
    assert user is not None
    assert (await delegated.authorize(user, "get", "/metrics"))[0] is allowed_at_first
    api.allowed = set() if allowed_at_first else {SA["username"]}  # RBAC changed
    clock.now += ttl - 1
    assert (await delegated.authorize(user, "get", "/metrics"))[0] is allowed_at_first
    clock.now += 1
    assert (await delegated.authorize(user, "get", "/metrics"))[0] is not allowed_at_first
    assert delegated.reviews["SubjectAccessReview"] == 2


async def test_an_api_error_is_raised_and_not_cached() -> None:
    delegated, api, _ = auth()
    api.fail = ConnectionError("API server unreachable")
    with pytest.raises(ConnectionError):
        await delegated.authenticate("good")
    api.fail = None
    user = await delegated.authenticate("good")
    assert user is not None
    api.fail = ConnectionError("API server unreachable")
    with pytest.raises(ConnectionError):
        await delegated.authorize(user, "get", "/metrics")
    api.fail = None
    assert (await delegated.authorize(user, "get", "/metrics"))[0] is True


async def test_tokens_are_kept_as_digests() -> None:
    delegated, _, _ = auth()
    await delegated.authenticate("good")
    assert "good" not in repr(delegated._tokens._entries)


@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 3), st.integers(0, 4)),
        max_size=60,
    ),
    limit=st.integers(1, 4),
)
def test_ttl_cache_returns_only_the_last_unexpired_value_and_stays_bounded(
    ops: list[tuple[bool, int, int, int]], limit: int
) -> None:
    cache: TtlCache[int, int] = TtlCache(limit=limit)
    last: dict[int, tuple[float, int]] = {}  # key → (expiry, value) of its last put
    now = 0.0
    for serial, (is_put, key, ttl, step) in enumerate(ops):
        now += step
        if is_put:
            cache.put(key, serial, float(ttl), now)
            last[key] = (now + ttl, serial)
        else:
            found, value = cache.get(key, now)
            if found:
                assert key in last
                assert last[key] == (last[key][0], value)
                assert now < last[key][0]
            elif key in last and now < last[key][0] and len(last) <= limit:
                # never evicted while fewer keys than the limit were ever put
                raise AssertionError(f"{key} lost before its expiry")
        assert len(cache) <= limit
