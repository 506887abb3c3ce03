"""Label-syntax checks the agent applies before publishing a key it built from device data.

Keys such as ``general.feature.gpustack.ai/<gKey>.count`` or ``…fit.gpustack.ai/<aKey>`` embed names
that are capped at 63 characters on their own; the suffix can push the name part over the limit. The
API server would reject the whole object (and nfd-master would drop the label), so a key that is not a
valid qualified name is skipped instead, as GPUStack's fit-label rule says — and reported by
``agent/validate.py``. The rules themselves are defined once, in :mod:`gpustack_worker.api.validation`.
"""

from __future__ import annotations

from gpustack_worker.api.validation import is_label_value, is_qualified_name

__all__ = ("is_label_value", "is_qualified_name")
