"""The aKey and gKey tables of reference §3.3, verbatim, plus the memory-quantity label rule (§3.2)."""

from __future__ import annotations

import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.identity import accelerator_key, cpu_manufacturer, general_key, memory_quantity


@pytest.mark.parametrize(
    ("manufacturer", "product", "expected"),
    [
        ("nvidia", "NVIDIA A10G", "nvidia-a10g"),
        ("nvidia", "Tesla T4", "nvidia-tesla-t4"),
        ("nvidia", "NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("nvidia", "NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb"),
        ("amd", "AMD Radeon RX 7800 XT", "amd-radeon-rx-7800-xt"),
        ("ascend", "910B2", "ascend-910b2"),
        ("hygon", "K100_AI", "hygon-k100_ai"),
        ("metax", "MXC500", "metax-mxc500"),
    ],
    ids=["a10g", "tesla-t4", "h100", "a100-sxm4", "amd-rx-7800-xt", "ascend-910b2", "hygon-k100", "metax"],
)
def test_accelerator_key(manufacturer: str, product: str, expected: str) -> None:
    assert accelerator_key(manufacturer, product) == expected


def test_accelerator_key_fits_a_label_name() -> None:
    a_key = accelerator_key("nvidia", "NVIDIA " + "X" * 100)
    assert len(a_key) <= 63
    assert a_key.startswith("nvidia-")


def _node(
    vendor: str | None, cpu_name: str | None, family: str | None, model: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    labels = {
        k: v
        for k, v in (
            (keys.NFD_CPU_VENDOR, vendor),
            (keys.NFD_CPU_FAMILY, family),
            (keys.NFD_CPU_ID, model),
        )
        if v is not None
    }
    annotations = {keys.CPU_NAME_ANNOTATION: cpu_name} if cpu_name is not None else {}
    return labels, annotations


@pytest.mark.parametrize(
    ("vendor", "cpu_name", "family", "model", "expected"),
    [
        ("AMD", "AMD EPYC 7R32", None, None, "amd-epyc-7r32"),
        ("AMD", "AMD EPYC 7R13 Processor", None, None, "amd-epyc-7r13"),
        ("Intel", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", None, None, "intel-xeon-platinum-8259cl"),
        ("AMD", "AMD EPYC 7763 64-Core Processor", None, None, "amd-epyc-7763"),
        ("AMD", None, "25", "1", "amd-25-1"),
        (None, None, None, None, "generic"),
        ("Intel", "11th Gen Intel(R) Core(TM) i7-1185G7 @ 3.00GHz", None, None, "intel-core-i7-1185g7"),
        # Rules of §3.3 beyond the table rows:
        ("AMD", "@unreported", "25", "1", "amd-25-1"),
        ("VendorUnknown", None, None, None, "generic"),
        ("AMD", None, "25", None, "amd"),
    ],
    ids=[
        "epyc-7r32",
        "epyc-7r13-processor",
        "xeon-8259cl",
        "epyc-7763-64-core",
        "family-id-fallback",
        "nothing",
        "core-i7-1185g7-derived",
        "at-means-unreported",
        "vendor-unknown",
        "family-without-id",
    ],
)
def test_general_key(
    vendor: str | None, cpu_name: str | None, family: str | None, model: str | None, expected: str
) -> None:
    labels, annotations = _node(vendor, cpu_name, family, model)
    assert general_key(labels, annotations) == expected


@pytest.mark.parametrize(
    ("vendor", "expected"),
    [("AMD", "amd"), ("Intel", "intel"), ("", "generic"), ("VendorUnknown", "generic")],
    ids=["amd", "intel", "empty", "vendor-unknown"],
)
def test_cpu_manufacturer(vendor: str, expected: str) -> None:
    assert cpu_manufacturer({keys.NFD_CPU_VENDOR: vendor}) == expected


@pytest.mark.parametrize(
    ("mib", "expected"),
    [(24576, "24Gi"), (16384, "16Gi"), (81920, "80Gi"), (1048576, "1Ti"), (16368, "16368Mi"), (0, "0")],
    ids=["a10g-24gi", "t4-16gi", "h100-80gi", "one-ti", "rx-7800-xt-not-whole-gi", "zero"],
)
def test_memory_quantity(mib: int, expected: str) -> None:
    assert memory_quantity(mib) == expected
