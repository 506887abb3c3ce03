"""Kueue's upstream webhook configurations, rewritten to call Kueue on its loopback server (pure part)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gpustack_worker.api import kueue_config
from gpustack_worker.devcluster import kueue_webhooks

BASE = "https://127.0.0.1:9443"
CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"


@pytest.fixture(scope="module")
def upstream() -> list[dict[str, Any]]:
    return kueue_webhooks.upstream_documents()


def _by_name(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for d in docs for w in d["webhooks"]}


def _rewrite(upstream: list[dict[str, Any]], **config: Any) -> list[dict[str, Any]]:
    return kueue_webhooks.webhook_configurations(
        upstream,
        base_url=BASE,
        ca_bundle=CA,
        config={**kueue_config.kueue_manager_config(), **config},  # top-level keys replaced
    )


def test_every_upstream_webhook_is_kept_and_called_by_url(upstream: list[dict[str, Any]]) -> None:
    docs = _rewrite(upstream)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "kueue-validating-webhook-configuration"),
    ]
    before, after = _by_name(upstream), _by_name(docs)
    assert set(after) == set(before)
    assert {"mworkload.kb.io", "vclusterqueue.kb.io", "mpod.kb.io", "vpod.kb.io"} <= set(after)
    for name, webhook in after.items():
        path = before[name]["clientConfig"]["service"]["path"]
        assert webhook["clientConfig"] == {"url": BASE + path, "caBundle": base64.b64encode(CA).decode()}
        # Rules, side effects and review versions stay upstream's.
        for key in ("rules", "sideEffects", "admissionReviewVersions"):
            assert webhook[key] == before[name][key]
    assert all(not n.startswith("gpustack-worker") for d in docs for n in [d["metadata"]["name"]])


def test_upstream_is_not_modified(upstream: list[dict[str, Any]]) -> None:
    snapshot = repr(upstream)
    _rewrite(upstream)
    assert repr(upstream) == snapshot


def test_job_webhooks_follow_the_managed_namespaces_and_kueue_kinds_see_all(
    upstream: list[dict[str, Any]],
) -> None:
    hooks = _by_name(_rewrite(upstream))
    selector = kueue_config.managed_jobs_namespace_selector()
    assert selector["matchExpressions"][0]["values"] == ["kube-system", "kueue-system", "gpustack-system"]
    for name in (
        "mpod.kb.io",
        "vpod.kb.io",
        "mjob.kb.io",
        "vjob.kb.io",
        "mdeployment.kb.io",
        "vjobset.kb.io",
    ):
        assert hooks[name]["namespaceSelector"] == selector, name
    for name in ("mworkload.kb.io", "vworkload.kb.io", "vclusterqueue.kb.io", "mresourceflavor.kb.io"):
        assert "namespaceSelector" not in hooks[name], name
    # A configuration that narrows the managed namespaces narrows the webhooks with it.
    narrow = {"matchLabels": {"team": "a"}}
    hooks = _by_name(_rewrite(upstream, managedJobsNamespaceSelector=narrow))
    assert hooks["vpod.kb.io"]["namespaceSelector"] == narrow


def test_builtin_kinds_fail_closed_only_when_their_integration_is_on(upstream: list[dict[str, Any]]) -> None:
    hooks = _by_name(_rewrite(upstream))  # batch/job and pod
    assert hooks["mpod.kb.io"]["failurePolicy"] == "Fail"
    assert hooks["vpod.kb.io"]["failurePolicy"] == "Fail"
    assert hooks["mjob.kb.io"]["failurePolicy"] == "Fail"
    assert hooks["mdeployment.kb.io"]["failurePolicy"] == "Ignore"
    assert hooks["vstatefulset.kb.io"]["failurePolicy"] == "Ignore"
    assert hooks["vclusterqueue.kb.io"]["failurePolicy"] == "Fail"
    hooks = _by_name(_rewrite(upstream, integrations={"frameworks": ["batch/job"]}))
    assert hooks["mpod.kb.io"]["failurePolicy"] == "Ignore"
    hooks = _by_name(_rewrite(upstream, integrations={"frameworks": ["pod", "deployment"]}))
    assert hooks["vdeployment.kb.io"]["failurePolicy"] == "Fail"


def test_a_configuration_without_a_namespace_selector_is_refused(upstream: list[dict[str, Any]]) -> None:
    config = kueue_config.kueue_manager_config()
    del config["managedJobsNamespaceSelector"]
    with pytest.raises(ValueError, match="managedJobsNamespaceSelector"):
        kueue_webhooks.webhook_configurations(upstream, base_url=BASE, ca_bundle=CA, config=config)
