"""The subset of the Prometheus Operator's and cert-manager's CRDs the chart uses, for the tests that install
it where those operators are not (the chart's dry-run test, and production values on a real node)."""

from __future__ import annotations

from typing import Any, Final

Doc = dict[str, Any]


def _structural(spec: Doc) -> Doc:
    return {"type": "object", "properties": {"spec": spec}}


def _crd(group: str, kind: str, plural: str, version: str, spec: Doc) -> Doc:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _structural(spec)},
                }
            ],
        },
    }


_STR: Final = {"type": "string"}
_STR_MAP: Final = {"type": "object", "additionalProperties": _STR}
_SELECTOR: Final = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _obj(**properties: Doc) -> Doc:
    return {"type": "object", "properties": properties}


def _list(item: Doc) -> Doc:
    return {"type": "array", "items": item}


#: The subset of the Prometheus Operator's and cert-manager's CRDs the chart uses: their kinds, versions
#: and the fields the chart writes, typed as upstream (monitoring.coreos.com/v1; cert-manager.io/v1).
#: Not preserve-unknown-fields, so a misspelled or misplaced field is refused by the Strict dry run.
OPERATOR_CRDS: Final = [
    _crd(
        "monitoring.coreos.com",
        "ServiceMonitor",
        "servicemonitors",
        "v1",
        _obj(
            selector=_SELECTOR,
            namespaceSelector=_obj(matchNames=_list(_STR), any={"type": "boolean"}),
            podTargetLabels=_list(_STR),
            targetLabels=_list(_STR),
            jobLabel=_STR,
            endpoints=_list(
                _obj(
                    port=_STR,
                    path=_STR,
                    scheme=_STR,
                    interval=_STR,
                    scrapeTimeout=_STR,
                    honorLabels={"type": "boolean"},
                )
            ),
        ),
    ),
    _crd(
        "monitoring.coreos.com",
        "PrometheusRule",
        "prometheusrules",
        "v1",
        _obj(
            groups=_list(
                _obj(
                    name=_STR,
                    interval=_STR,
                    rules=_list(
                        _obj(
                            alert=_STR,
                            record=_STR,
                            expr={"x-kubernetes-int-or-string": True},
                            annotations=_STR_MAP,
                            labels=_STR_MAP,
                            keep_firing_for=_STR,
                            **{"for": _STR},
                        )
                    ),
                )
            )
        ),
    ),
    _crd(
        "cert-manager.io",
        "Certificate",
        "certificates",
        "v1",
        _obj(
            secretName=_STR,
            commonName=_STR,
            dnsNames=_list(_STR),
            duration=_STR,
            renewBefore=_STR,
            issuerRef=_obj(name=_STR, kind=_STR, group=_STR),
        ),
    ),
    _crd(
        "cert-manager.io",
        "Issuer",
        "issuers",
        "v1",
        _obj(selfSigned=_obj(crlDistributionPoints=_list(_STR)), ca=_obj(secretName=_STR)),
    ),
]
