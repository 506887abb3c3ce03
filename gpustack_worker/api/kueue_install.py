"""Where an installed Kueue lives, as its Helm chart and manifests install it: its namespace, the
ConfigMap that holds its configuration and the key inside it, and its Deployment.

Names only, importing nothing: the command line's parser prints them as flag defaults before any
command's code is loaded, and ``preflight``, ``kueue-config`` and ``cleanup`` read Kueue from the same
places.
"""

from __future__ import annotations

from typing import Final

__all__ = ("CONFIG_KEY", "KUEUE_CONFIGMAP", "KUEUE_DEPLOYMENT", "KUEUE_NAMESPACE")

#: Where Kueue runs (its Helm chart's and its manifests' namespace).
KUEUE_NAMESPACE: Final = "kueue-system"
#: The ConfigMap Kueue reads its configuration from, ``namespace/name``.
KUEUE_CONFIGMAP: Final = f"{KUEUE_NAMESPACE}/kueue-manager-config"
#: The key of that ConfigMap that holds the configuration.
CONFIG_KEY: Final = "controller_manager_config.yaml"
#: Kueue's Deployment, ``namespace/name`` (preflight reads its ``--feature-gates`` flag).
KUEUE_DEPLOYMENT: Final = f"{KUEUE_NAMESPACE}/kueue-controller-manager"
