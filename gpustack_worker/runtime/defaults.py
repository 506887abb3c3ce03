"""Where the processes and every command start from: the settings ConfigMap's name and namespace, and the
deadline of a request.

A module that imports nothing, so the command line's parser can print these defaults in its help without
loading the API client or the settings model: ``gpustack-worker --version``, ``--help`` and a usage error
answer before any command's code is imported (a CLI started hundreds of times by scripts and tests pays
for every import on every start).
"""

from __future__ import annotations

from typing import Final

__all__ = ("DEFAULT_CONFIGMAP", "DEFAULT_NAMESPACE", "DEFAULT_TIMEOUT_S")

#: The settings ConfigMap the processes read live (docs/settings.md).
DEFAULT_CONFIGMAP: Final = "gpustack-settings"
#: The namespace it lives in: the chart's default system namespace.
DEFAULT_NAMESPACE: Final = "gpustack-system"
#: Default per-request timeout; kr8s' own default is "none at all".
DEFAULT_TIMEOUT_S: Final = 30.0
