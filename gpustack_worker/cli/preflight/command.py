"""``gpustack-worker preflight``: read what the checks need, hand it to :mod:`.preflighting`, print the table.

Read-only: ``/version``, API discovery, GETs and LISTs, one dry-run create (the webhook probe: nothing is
stored) and SelfSubjectRulesReviews made as each of our ServiceAccounts (impersonation: run it as a
cluster admin). Kueue's configuration is read from ``--kueue-config FILE`` when given (a Configuration
or a ConfigMap holding one — the dev cluster's Kueue reads ``DIR/kueue-config.yaml``), else from the
ConfigMap ``--kueue-configmap`` (Kueue's Helm chart: ``kueue-system/kueue-manager-config``), and the
``--feature-gates`` flag from Kueue's Deployment when it has one. Exit 0 when no check fails, 1
otherwise; ``-o json`` for machines.

Before the chart's install (:mod:`.preflight_stage`: decided from the chart's objects, or forced with
``--before-install``/``--after-install``) what the chart installs is ``installs with the chart``, not a
failure.

:func:`startup_problems` is what ``controller`` and ``agent`` run before they start
(:data:`~.preflighting.STARTUP_CHECKS`: the Kubernetes version and the kinds the process uses).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from gpustack_worker.api import kinds, rbac
from gpustack_worker.api.kueue_install import CONFIG_KEY
from gpustack_worker.runtime.resources import Resource

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from gpustack_worker.cli.preflight import preflighting
    from gpustack_worker.runtime.client import Client

__all__ = ("gather", "release_evidence", "run", "startup_problems")

_DEPLOYMENT: Final = Resource("apps", "v1", "Deployment", "deployments", namespaced=True)
_COHORT: Final = Resource(kinds.KUEUE_GROUP, kinds.KUEUE_VERSION, "Cohort", "cohorts", namespaced=False)
_RULES_REVIEWS: Final = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
#: The namespace the cluster-scoped grants are reviewed in: one with no Role of ours (it need not exist),
#: so only ClusterRoleBindings answer there.
CLUSTER_REVIEW_NAMESPACE: Final = "gpustack-preflight-cluster-scope"
#: The field of the webhook probe (``devcluster.worker_webhooks.probe_source``) only our webhook refuses.
_PROBE_FIELD: Final = "spec.configMap.configMapRef.namespace"


# --- reading --------------------------------------------------------------------------------------------


async def _raw(
    client: Client,
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: Sequence[tuple[str, str]] = (),
) -> tuple[int, dict[str, Any]]:
    """One request, any path, with headers (impersonation: a header may repeat); the status and the
    decoded body. Errors are answers here (a 404 is a finding), so nothing is raised for a status.

    It goes to the client's session directly, so it is bounded here as the client bounds its own
    requests: the whole request within ``client.timeout_s`` (``--request-timeout``), else
    :class:`~gpustack_worker.runtime.client.RequestTimeout` naming the phase it stopped in."""
    from urllib.parse import parse_qsl

    import orjson

    from gpustack_worker.runtime import wire
    from gpustack_worker.runtime.client import RequestTimeout

    # The query goes as parameters: the client's session %-encodes a path whole (a '?' in it included).
    where, _, query = path.partition("?")
    root, _, rest = where.lstrip("/").partition("/")
    kwargs: dict[str, Any] = {"headers": [("Content-Type", "application/json"), *headers]}
    if query:
        kwargs["params"] = dict(parse_qsl(query, keep_blank_values=True))
    if body is not None:
        kwargs["content"] = orjson.dumps(body)
    progress = wire.Progress()
    token = wire.PROGRESS.set(progress)
    deadline = asyncio.timeout(client.timeout_s)
    try:
        async with (
            deadline,
            client._api.call_api(
                method, version="", base=f"/{root}", url=rest, raise_for_status=False, **kwargs
            ) as response,
        ):
            progress.phase = wire.BODY
            await response.aread()
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        raise RequestTimeout(
            client.server, method, path, progress.phase, client.timeout_s or 0.0, via=client.via
        ) from exc
    finally:
        wire.PROGRESS.reset(token)
    try:
        data = orjson.loads(response.content) if response.content else {}
    except orjson.JSONDecodeError:
        data = {"message": response.text[:500]}
    return response.status_code, data if isinstance(data, dict) else {"message": str(data)}


async def _discovery(client: Client, groups: list[preflighting.ApiGroup]) -> dict[str, frozenset[str] | None]:
    out: dict[str, frozenset[str] | None] = {}
    for gv in sorted({g.group_version for g in groups}):
        status, body = await _raw(client, "GET", f"/apis/{gv}" if "/" in gv else f"/api/{gv}")
        out[gv] = (
            frozenset(
                str(r.get("name")) for r in body.get("resources") or () if "/" not in str(r.get("name"))
            )
            if status == 200
            else None
        )
    return out


async def _api_results(client: Client, components: list[rbac.Component]) -> list[preflighting.Result]:
    from gpustack_worker.cli.preflight import preflighting

    status, version = await _raw(client, "GET", "/version")
    results = [preflighting.kubernetes_version(version if status == 200 else None)]
    groups = preflighting.api_groups(components)
    return [*results, *preflighting.served_apis(groups, await _discovery(client, groups))]


async def startup_problems(client: Client, component: rbac.Component, *, prefix: str) -> list[str]:
    """The start-up checks of one process: one line per problem (empty: start)."""
    from gpustack_worker.cli.preflight import preflighting

    results = await _api_results(client, [component])
    return preflighting.problem_lines(
        [r for r in results if r.check in preflighting.STARTUP_CHECKS], prefix=prefix
    )


def _split_ref(ref: str) -> tuple[str, str]:
    ns, sep, name = ref.partition("/")
    if not sep or not ns or not name:
        raise ValueError(f"expected NAMESPACE/NAME, got {ref!r}")
    return ns, name


def _config_from_document(doc: Any) -> Any:
    """A Kueue Configuration, or a ConfigMap holding one under :data:`CONFIG_KEY`."""
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        text = (doc.get("data") or {}).get(CONFIG_KEY)
        return yaml.safe_load(text) if text else None
    return doc


async def _kueue_config(client: Client, args: argparse.Namespace) -> tuple[Any, str]:
    if args.kueue_config:
        path = Path(args.kueue_config)
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
            return _config_from_document(yaml.safe_load(text)), str(path)
        except (OSError, yaml.YAMLError) as exc:
            return None, f"{path} ({exc})"
    ns, name = _split_ref(args.kueue_configmap)
    cm = await client.get(kinds.CONFIG_MAP, name, ns)
    source = f"ConfigMap {ns}/{name}"
    if cm is None:
        return None, source
    try:
        return _config_from_document(cm), f"{source} key {CONFIG_KEY}"
    except yaml.YAMLError as exc:
        return None, f"{source} ({exc})"


async def _gate_flag(client: Client, ref: str) -> str | None:
    ns, name = _split_ref(ref)
    deployment = await client.get(_DEPLOYMENT, name, ns)
    for container in ((((deployment or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or ():
        for arg in [*(container.get("command") or ()), *(container.get("args") or ())]:
            if str(arg).startswith("--feature-gates="):
                return str(arg).split("=", 1)[1]
    return None


async def _rules(
    client: Client, component: rbac.Component, namespace: str
) -> dict[str, list[dict[str, Any]]]:
    # The user and groups a ServiceAccount's token carries, so bindings to either count as they would.
    headers = (
        ("Impersonate-User", f"system:serviceaccount:{namespace}:{component.name}"),
        ("Impersonate-Group", "system:serviceaccounts"),
        ("Impersonate-Group", f"system:serviceaccounts:{namespace}"),
        ("Impersonate-Group", "system:authenticated"),
    )
    wanted = {CLUSTER_REVIEW_NAMESPACE: ""}
    for ns in component.namespaced:
        wanted[namespace if ns == rbac.SYSTEM else ns] = namespace if ns == rbac.SYSTEM else ns
    out: dict[str, list[dict[str, Any]]] = {}
    for review_ns, key in wanted.items():
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": review_ns},
        }
        status, answer = await _raw(client, "POST", _RULES_REVIEWS, body=body, headers=headers)
        if status != 201:
            raise PermissionError(f"HTTP {status}: {answer.get('message') or answer}")
        out[key] = list((answer.get("status") or {}).get("resourceRules") or [])
    return out


async def gather(client: Client, args: argparse.Namespace) -> list[preflighting.Result]:
    """Every check, in table order."""
    from gpustack_worker.api import crdgen, kueue_merge, webhooks
    from gpustack_worker.cli.preflight import preflighting
    from gpustack_worker.cli.preflight import queues as preflight_queues
    from gpustack_worker.devcluster.worker_webhooks import probe_source
    from gpustack_worker.runtime.client import ApiError

    namespace: str = args.namespace
    results = await _api_results(client, list(rbac.COMPONENTS))
    served = {r.check for r in results if r.outcome is preflighting.Outcome.OK}

    groups = {g.check: g for g in preflighting.api_groups(rbac.COMPONENTS)}

    config: Any = None
    try:
        config, source = await _kueue_config(client, args)
        flag = await _gate_flag(client, args.kueue_deployment)
        if config is not None and not isinstance(config, dict):
            config, source = None, f"{source} (not a YAML mapping)"
        result = preflighting.kueue_configuration(
            config, source=source, gate_flag=flag, system_namespace=namespace
        )
    except (ApiError, ValueError) as exc:
        result = preflighting.Result("kueue-config", preflighting.Outcome.FAIL, f"could not read: {exc}")
    results.append(result)

    if "nfd-api" in served:
        features, _ = await client.list(kinds.NODE_FEATURE)
        nodes, _ = await client.list(kinds.NODE)
        results.append(preflighting.nfd_master(features, nodes))
    else:
        results.append(preflighting.not_checked("nfd-master", "NodeFeature", groups["nfd-api"].fix))

    crds = {}
    for crd in crdgen.all_crds():
        name = crd["metadata"]["name"]
        crds[name] = await client.get(kinds.CRD, name)
    results.append(preflighting.crd_schemas(crds))
    if "devices-api" in served:
        devices, _ = await client.list(kinds.DEVICES)
        results.append(preflighting.devices_published(len(devices)))
    else:
        results.append(preflighting.devices_published(None))

    configuration = await client.get(
        Resource(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            namespaced=False,
        ),
        webhooks.VALIDATING_CONFIGURATION,
    )
    status, answer = await _raw(
        client, "POST", f"{kinds.TOPOLOGY_SOURCE.collection_path()}?dryRun=All", body=probe_source()
    )
    results.append(
        preflighting.webhook_reachable(
            configuration,
            status,
            str(answer.get("message") or ""),
            probe_field=_PROBE_FIELD,
            namespace=namespace,
        )
    )

    for component in rbac.COMPONENTS:
        try:
            rules: dict[str, list[dict[str, Any]]] | None = await _rules(client, component, namespace)
            error = ""
        except PermissionError as exc:
            rules, error = None, str(exc)
        results.append(preflighting.rbac_result(component, rules, system_namespace=namespace, error=error))

    results.append(
        preflighting.namespace_present(await client.get(kinds.NAMESPACE, namespace), namespace=namespace)
    )
    name = args.settings_configmap
    results.append(
        preflighting.settings_present(
            await client.get(kinds.CONFIG_MAP, name, namespace), namespace=namespace, name=name
        )
    )

    if "kueue-api" in served:
        queues, _ = await client.list(kinds.CLUSTER_QUEUE)
        try:
            cohorts, _ = await client.list(_COHORT)
        except ApiError as exc:
            if exc.status != 404:
                raise
            cohorts = []  # a Kueue without the Cohort API: only ClusterQueues hold quota
        configured = isinstance(config, dict) and not any(
            c.path.startswith("resources.transformations") for c in kueue_merge.required_changes(config)
        )
        results.extend(preflight_queues.queue_impact(queues, cohorts, configured=configured))
    else:
        results.append(preflighting.not_checked("clusterqueues", "ClusterQueue", groups["kueue-api"].fix))
    return preflighting.ordered(results)


async def release_evidence(
    client: Client, *, namespace: str, settings_configmap: str
) -> tuple[list[str], int]:
    """Which of the chart's objects (:func:`.preflight_stage.release_objects`) exist, and how many were
    looked for. The namespaced ones are not read when the namespace does not exist."""
    from gpustack_worker.cli.preflight import stage as preflight_stage

    objects = preflight_stage.release_objects(namespace=namespace, settings_configmap=settings_configmap)
    has_namespace = await client.get(kinds.NAMESPACE, namespace) is not None
    present = []
    for obj in objects:
        if obj.namespace and not has_namespace:
            continue
        if await client.get(obj.resource, obj.name, obj.namespace or None) is not None:
            present.append(obj.describe())
    return present, len(objects)


async def run(args: argparse.Namespace) -> int:
    from gpustack_worker.cli.preflight import preflighting
    from gpustack_worker.cli.preflight import stage as preflight_stage
    from gpustack_worker.cli.request_timeout import request_timeout_of
    from gpustack_worker.runtime.client import Client

    try:
        _split_ref(args.kueue_configmap)
        _split_ref(args.kueue_deployment)
    except ValueError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return 2
    client = await Client.connect(
        args.kubeconfig,
        context=getattr(args, "context", None),
        timeout_s=request_timeout_of(args),
        user_agent="gpustack-worker-preflight",
    )
    try:
        # A refused read: the CLI's one error line (cli/errors.py).
        present, looked_for = await release_evidence(
            client, namespace=args.namespace, settings_configmap=args.settings_configmap
        )
        results = await gather(client, args)
    finally:
        await client.close()
    from gpustack_worker.cli.output import emit

    forced = preflight_stage.Stage(args.stage) if args.stage else None
    decision = preflight_stage.decide(present, looked_for=looked_for, forced=forced)
    judged = preflight_stage.judged(results, decision)
    data = json.loads(json.dumps(preflight_stage.payload(judged, decision)))
    emit(
        data,
        args.output,
        lambda _: preflight_stage.render_text(
            judged, decision, namespace=args.namespace, verbose=args.verbose
        ),
    )
    return preflighting.exit_code(judged)
