"""Label-syntax checks the agent applies before publishing a key it built from device data.

Keys such as ``general.feature.gpustack.ai/<gKey>.count`` or ``…fit.gpustack.ai/<aKey>`` embed names
that are capped at 63 characters on their own; the suffix can push the name part over the limit. The
API server would reject the whole object (and nfd-master would drop the whole NodeFeature), so a key
that is not a valid qualified name is skipped instead, as the reference's fit-label rule says.
"""

from __future__ import annotations

import re

__all__ = ("is_label_value", "is_qualified_name")

_NAME = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")


def is_qualified_name(key: str) -> bool:
    """Kubernetes ``IsQualifiedName``: ``[prefix/]name``, name ≤ 63, prefix a DNS subdomain ≤ 253."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return False
    if key.count("/") == 1 and not (prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_NAME.match(name))


def is_label_value(value: str) -> bool:
    """Kubernetes ``IsValidLabelValue``: empty, or ≤ 63 characters of the name alphabet."""
    return value == "" or (len(value) <= 63 and bool(_NAME.match(value)))
