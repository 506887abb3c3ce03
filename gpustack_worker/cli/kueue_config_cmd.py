"""``gpustack-worker kueue-config``: Kueue's configuration for the chain, alone or merged into a team's.

Without ``--merge``: the chart's file (``chart/files/kueue-manager-config.yaml``) on stdout. With
``--merge FILE`` (``-`` for stdin): the team's configuration with the keys the chain needs laid over it
(:func:`gpustack_worker.api.kueue_merge.merge`: their integrations, transformations of other resources and
every other setting kept) on stdout — in the same shape as read, so a ConfigMap
(``kubectl -n kueue-system get cm kueue-manager-config -o yaml``) comes back as that ConfigMap — and what
changed on stderr, one line per key. ``--feature-gates VALUE``: Kueue is started with that flag, so the
gates are judged there (and the new flag value printed) instead of in the file. Exit 0; 1 when the input
cannot be read; with ``--check``, 1 when anything would change (nothing is printed on stdout then).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack_worker.api import kinds

if TYPE_CHECKING:
    import argparse

__all__ = ("CONFIG_KEY", "add_parser", "merge_document", "run")

#: The key of Kueue's ConfigMap that holds its configuration (Kueue's Helm chart).
CONFIG_KEY = "controller_manager_config.yaml"


def add_parser(sub: Any) -> None:
    """Add ``kueue-config`` to the top-level subcommands."""
    p = sub.add_parser(
        "kueue-config",
        help="Kueue's configuration for the chain, or merged into an existing one (--merge FILE)",
        description=(
            "Print the Kueue configuration the chain needs; with --merge FILE, lay the keys the chain "
            "needs over an existing Kueue configuration (or the ConfigMap holding it), keeping everything "
            "else, print the result on stdout and what changed on stderr."
        ),
    )
    p.add_argument("--merge", default=None, metavar="FILE", help="the existing configuration ('-': stdin)")
    p.add_argument(
        "--feature-gates",
        default=None,
        metavar="VALUE",
        help="the value of Kueue's --feature-gates flag, when its Deployment sets one",
    )
    p.add_argument(
        "--namespace",
        default=kinds.SYSTEM_NAMESPACE,
        help="the worker's system namespace (default: %(default)s)",
    )
    p.add_argument("--check", action="store_true", help="print nothing; exit 1 when anything would change")


def merge_document(
    doc: Any, *, feature_gates: str | None = None, system_namespace: str = kinds.SYSTEM_NAMESPACE
) -> tuple[Any, list[str]]:
    """The merged document (a Configuration, or a ConfigMap holding one) and the change lines.

    ValueError when ``doc`` is neither (or the gate flag is malformed)."""
    import yaml

    from gpustack_worker.api import kueue_config, kueue_merge

    flags = kueue_merge.gate_flag_values(feature_gates) if feature_gates is not None else None
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        text = (doc.get("data") or {}).get(CONFIG_KEY)
        if not text:
            raise ValueError(f"the ConfigMap has no data key {CONFIG_KEY!r}")
        inner, lines = merge_document(
            yaml.safe_load(text), feature_gates=feature_gates, system_namespace=system_namespace
        )
        out = {**doc, "data": {**doc["data"], CONFIG_KEY: yaml.safe_dump(inner, sort_keys=True)}}
        meta = {k: v for k, v in (doc.get("metadata") or {}).items() if k in ("name", "namespace", "labels")}
        out["metadata"] = meta
        return out, lines
    if not isinstance(doc, dict):
        raise ValueError("expected a Kueue Configuration (YAML mapping) or a ConfigMap holding one")
    if doc.get("apiVersion") != kueue_config.CONFIG_API_VERSION or doc.get("kind") != "Configuration":
        raise ValueError(
            f"expected apiVersion {kueue_config.CONFIG_API_VERSION}, kind Configuration; got "
            f"{doc.get('apiVersion')!r}, {doc.get('kind')!r} (convert a v1beta1 file with Kueue's own "
            "migration first)"
        )
    merged, changes = kueue_merge.merge(doc, gate_flags=flags, system_namespace=system_namespace)
    lines = [c.describe() for c in changes]
    if any(c.path == "--feature-gates" for c in changes):
        lines.append("Kueue's Deployment: set the --feature-gates flag to the value above (not in the file)")
    return merged, lines


def run(args: argparse.Namespace) -> int:
    import yaml

    from gpustack_worker.api import kueue_config

    if args.merge is None:
        if args.check:
            print("kueue-config: --check needs --merge FILE", file=sys.stderr)
            return 2
        print(kueue_config.render(), end="")
        return 0
    try:
        text = sys.stdin.read() if args.merge == "-" else Path(args.merge).read_text(encoding="utf-8")
        merged, lines = merge_document(
            yaml.safe_load(text), feature_gates=args.feature_gates, system_namespace=args.namespace
        )
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"kueue-config --merge {args.merge}: {exc}", file=sys.stderr)
        return 1
    for line in lines or ["nothing to change: the configuration already gives the chain what it needs"]:
        print(f"kueue-config: {line}", file=sys.stderr)
    if args.check:
        return 1 if lines else 0
    print(yaml.dump(merged, Dumper=_dumper(), sort_keys=True, default_flow_style=False, width=110), end="")
    return 0


def _dumper() -> Any:
    """A YAML dumper writing multi-line strings (a ConfigMap's embedded file) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper
