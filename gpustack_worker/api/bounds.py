"""Physical bounds on what a node's inventory and ledger can say, declared once.

The CRD schemas (``api/crds/devices.py``) put these as ``maximum``/``maxItems`` so the API server
rejects what it can, and the checks in :mod:`gpustack_worker.api.devices_check` (and the node agent's)
enforce them again on every read, because an object stored before a bound existed, or written by a
client that skips validation, still reaches the cache. Each bound is a fact about hardware or a size
GPUStack's device plugin fixes, not a tunable; the reason is next to each.
"""

from __future__ import annotations

from typing import Final

from gpustack_worker.api import keys

__all__ = (
    "INT32_MAX",
    "MAX_ACCELERATORS_PER_GROUP",
    "MAX_CARD_MEMORY_MIB",
    "MAX_CPU_CORES",
    "MAX_EXTENDED_RESOURCE",
    "MAX_GROUPS",
    "MAX_INTERFACES",
    "MAX_LABEL_VALUE",
    "MAX_NAME_PART",
    "MAX_PERCENT",
    "MAX_POOL_TOKENS",
    "MAX_PROFILES_PER_CARD",
    "MAX_PROFILE_INSTANCES",
    "MAX_SLICES_PER_CARD",
    "MAX_UNITS",
)

#: Largest int32 (the Go type of every count in ``Devices``).
INT32_MAX: Final = 2**31 - 1

#: Units one card has (``M``): ``remaining`` and ``allocated`` lie in ``0..M`` — a card never has
#: more free (or more allocated) units than a whole card.
MAX_UNITS: Final = keys.UNITS_PER_ACCELERATOR

#: Soft slices one card can host: ``SlicedResourceMaxSize`` (512, the device plugin's power-of-two
#: token pool per card). The per-manufacturer counts (128 at most) sit below it.
MAX_SLICES_PER_CARD: Final = 512

#: Instances of one hardware-partition profile on one card: every instance takes at least one memory
#: slice and a card has at most 8 (GPUStack's ``memorySlices`` range is ``1..8``; an A100 takes
#: seven ``1g.10gb``).
MAX_PROFILE_INSTANCES: Final = 8

#: Per-card VRAM in MiB: 4 TiB. The largest cards shipping carry 288 GB of HBM; 4 TiB leaves an order
#: of magnitude of headroom while keeping a node's ``.sliced.memory-mib`` sum far inside the integer
#: range the API server accepts for an extended resource (a ``memory: 1e16`` card was stored as
#: ``10P`` and rejected with 422 on every retry).
MAX_CARD_MEMORY_MIB: Final = 4 * 1024 * 1024

#: Percent of one card (``memory-percentage`` contributes exactly this per card, and a non-overcommit
#: card's ``cores-percentage`` as well).
MAX_PERCENT: Final = 100

#: Cards of one model on one node. Eight or sixteen is usual; 256 leaves room for dense boards.
MAX_ACCELERATORS_PER_GROUP: Final = 256

#: Distinct accelerator models on one node.
MAX_GROUPS: Final = 32

#: Partition profiles one card offers (NVIDIA's largest list, with the ``+me``/``+gfx`` variants, is
#: about 20).
MAX_PROFILES_PER_CARD: Final = 64

#: Network interfaces in ``spec.interfaces`` (physical ports plus SR-IOV functions).
MAX_INTERFACES: Final = 512

#: CPU cores a Node may report (``status.capacity.cpu``, rounded up): 2^20. Linux builds for at most
#: 8192 CPUs; virtual-kubelet providers advertise tens of thousands; a million is no machine.
MAX_CPU_CORES: Final = 2**20

#: Tokens in a device-plugin pool (``<base>.sliced`` / ``<base>.partitioned``): a device list is
#: counted in int32 by every reader.
MAX_POOL_TOKENS: Final = INT32_MAX

#: Largest value the API server accepts for an extended resource: it must be a whole number and it
#: checks that on the value in thousandths, held in int64.
MAX_EXTENDED_RESOURCE: Final = (2**63 - 1) // 1000

#: Length of a label value and of the name part of a qualified name.
MAX_LABEL_VALUE: Final = 63
MAX_NAME_PART: Final = 63
