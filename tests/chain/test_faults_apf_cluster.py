"""Fault: API Priority and Fairness rejecting the controller with 429 (issue 17).

The operator stack (:func:`tests.chain.fault_kit.running_chain`: the agent and the controller's
controllers in this process, each with its ServiceAccount's client) runs the fault kit's scenario on an
audited control plane of its own. As soon as the controllers start, an admin puts the controller's
ServiceAccount on a priority level of its own (kube-apiserver enables APF, ``flowcontrol.apiserver.k8s.io/
v1``, by default):

- a ``Limited`` PriorityLevelConfiguration with ``nominalConcurrencyShares: 0`` and no lending or borrowing
  (``lendablePercent: 0``, ``borrowingLimitPercent: 0``): a concurrency limit of 0 seats, which APF's queue
  set treats as "one request at a time" (a request wider than the limit runs only when nothing else of
  the level runs, ``canAccommodateSeatsLocked``), and ``limitResponse: Reject``: every request that
  arrives while another of the controller's runs is answered 429 at once, with ``Retry-After``;
- a FlowSchema matching that ServiceAccount, every verb, resource and non-resource URL, with
  ``matchingPrecedence`` 50 (below the default ``service-accounts`` schema's 9000, so it wins).

The fault is in force once the API server has digested the schema (its ``Dangling`` condition is
written, ``False``), while the chain is still converging; the controllers' informers and workers send
requests concurrently, so rejections are certain, and the test asserts they happened
(``rest_client_requests_total{code="429"}`` of this process, and 429 answers to the controller's user in
the audit log). The client retries a 429 after ``Retry-After`` (``runtime/client.py``), the controllers
retry what still failed through their rate limiters.

Asserted: the chain converges under the fault to the same objects as the undisturbed run
(:func:`fault_kit.baseline`: no write lost), and no write was doubled: no object that was already at its
final state when the fault was injected (:func:`fault_kit.at_rest`) got an accepted write afterwards
(:func:`fault_kit.rewritten`; a rejected request is not a write). The per-object write counts against the
undisturbed run's (:func:`fault_kit.doubled_writes`) are printed, not asserted (the kit says why). No
duration is asserted.

The control plane is the session's, put back to its baseline (tests/kit/reset.py): the pools hold
exactly the scenario's Nodes and the chain starts from nothing. The fault is two objects, deleted again
when the test ends (and by the next reset) so that no later module's controller meets it; the audit log
is read from the test's start.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

import pytest

from gpustack_worker.api import kinds, rbac
from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.resources import Resource
from tests.chain import fault_kit
from tests.kit.cluster import shared_baseline
from tests.stack import condition, eventually

if TYPE_CHECKING:
    from gpustack_worker.devcluster.audit import AuditEvent

pytestmark = pytest.mark.cluster

_FLOWCONTROL: Final = "flowcontrol.apiserver.k8s.io"
PRIORITY_LEVEL: Final = Resource(
    _FLOWCONTROL, "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations", namespaced=False
)
FLOW_SCHEMA: Final = Resource(_FLOWCONTROL, "v1", "FlowSchema", "flowschemas", namespaced=False)
NAME: Final = "gpustack-fault-controller"
#: Below every default schema that matches a ServiceAccount (``service-accounts``: 9000), above ``exempt``.
PRECEDENCE: Final = 50
REJECTED: Final = {"name": "rest_client_requests_total", "code": "429"}


def priority_level() -> dict[str, Any]:
    """0 nominal seats, nothing lent or borrowed, reject instead of queueing."""
    return {
        "apiVersion": f"{_FLOWCONTROL}/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": NAME},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }


def flow_schema() -> dict[str, Any]:
    """Every request of the controller's ServiceAccount goes to :func:`priority_level`."""
    account = {"name": rbac.CONTROLLER.name, "namespace": kinds.SYSTEM_NAMESPACE}
    return {
        "apiVersion": f"{_FLOWCONTROL}/v1",
        "kind": "FlowSchema",
        "metadata": {"name": NAME},
        "spec": {
            "priorityLevelConfiguration": {"name": NAME},
            "matchingPrecedence": PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "ServiceAccount", "serviceAccount": account}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


async def in_force(admin: Client) -> bool:
    """The API server's APF config controller has digested the schema: it wrote ``Dangling: False``
    (its priority level exists)."""
    fs = await admin.get(FLOW_SCHEMA, NAME)
    return condition(fs, "Dangling").get("status") == "False"


def rejections(audit: AuditLog) -> list[AuditEvent]:
    """The controller's requests APF rejected, as the server recorded them."""
    return [e for e in audit.events(username=fault_kit.CONTROLLER_USER) if e.code == 429]


async def test_the_chain_converges_through_429s_to_the_undisturbed_objects_writing_nothing_twice() -> None:
    undisturbed = await fault_kit.baseline()
    cluster = shared_baseline()
    assert cluster.audit_log is not None
    audit = AuditLog.from_now(cluster.audit_log)
    admin = await Client.connect(str(cluster.kubeconfig), user_agent="faults-apf")
    rejected_before = fault_kit.metric(**REJECTED)
    try:
        async with fault_kit.running_chain(cluster) as stack:
            done = fault_kit.at_rest(await fault_kit.snapshot(admin), undisturbed.objects)
            since = datetime.datetime.now(datetime.UTC)
            # injected as the controllers start: their informers list and watch, their workers write
            await admin.create(PRIORITY_LEVEL, priority_level())
            await admin.create(FLOW_SCHEMA, flow_schema())
            await eventually(lambda: in_force(admin), within=fault_kit.CONVERGE_S)
            in_force_at_writes = stack.controller_client.writes
            final = await fault_kit.converged(stack, undisturbed.objects)
            rejected = fault_kit.metric(**REJECTED) - rejected_before
            total_writes = stack.controller_client.writes
    finally:
        try:
            # The fault ends with the test: the controller's ServiceAccount is the session's too.
            await admin.delete(FLOW_SCHEMA, NAME)
            await admin.delete(PRIORITY_LEVEL, NAME)
        finally:
            await admin.close()
    users = (fault_kit.CONTROLLER_USER, fault_kit.AGENT_USER)
    writes = fault_kit.accepted_writes(audit, users)
    again = fault_kit.rewritten(audit, users, since, done)
    refused = rejections(audit)

    print(
        f"[faults-apf] fault in force after {in_force_at_writes} of {total_writes} controller writes;"
        f" {rejected:.0f} requests answered 429 ({len(refused)} in the audit log)"
    )
    more = fault_kit.doubled_writes(writes, undisturbed.writes)
    print(f"[faults-apf] written more often than undisturbed (diagnostic): {more}")
    fault_kit.assert_same(undisturbed.objects, final)
    assert [f"{e.verb} {e.resource_path} {e.name}" for e in again] == []
    # the fault happened, and the client's metric and the server's log both say so
    assert rejected > 0
    assert refused
    assert {e.code for e in refused} == {429}
