"""Table tests for the text algorithms of reference §3.3 and Appendix A.1."""

from __future__ import annotations

import pytest

from gpustack_worker.api.normalize import fnv64a_hex, normalize_name, sanitize_label_value, strip_cpu_cruft


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # The FNV reference test vectors for FNV-1a 64 (isthe.com/chongo/tech/comp/fnv).
        ("", "cbf29ce484222325"),
        ("a", "af63dc4c8601ec8c"),
        ("foobar", "85944171f73967e8"),
        # Reference §2.1.2: the DERIVED default (hostname-only) profile hash.
        ("kubernetes.io/hostname", "87bf574bea2a4f23"),
    ],
    ids=["empty", "a", "foobar", "hostname-only-hierarchy"],
)
def test_fnv64a_hex(data: str, expected: str) -> None:
    assert fnv64a_hex(data) == expected
    assert fnv64a_hex(data.encode()) == expected


def test_fnv64a_hex_is_zero_padded_to_16_digits() -> None:
    digests = {fnv64a_hex(str(i)) for i in range(2000)}
    assert all(len(d) == 16 and d == d.lower() for d in digests)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("AMD EPYC 7R13 Processor", "AMD EPYC 7R13"),
        ("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "Intel Xeon Platinum 8259CL"),
        ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763"),
        ("11th Gen Intel(R) Core(TM) i7-1185G7 @ 3.00GHz", "Intel Core i7-1185G7"),
        ("Genuine Intel(R) CPU 0000", "Intel CPU 0000"),
        ("AMD Ryzen 9 7950X 16-cores", "AMD Ryzen 9 7950X"),
    ],
    ids=["processor-suffix", "clock-and-trademarks", "n-core", "nth-gen", "genuine", "n-cores-lowercase"],
)
def test_strip_cpu_cruft(name: str, expected: str) -> None:
    assert strip_cpu_cruft(name) == expected


@pytest.mark.parametrize(
    ("name", "prefix", "max_length", "strip", "expected"),
    [
        ("NVIDIA A10G", "nvidia", 56, False, "a10g"),
        ("Tesla T4", "nvidia", 56, False, "tesla-t4"),
        ("K100_AI", "hygon", 57, False, "k100_ai"),
        # Prefix stripping only at the exact moment the buffer equals the prefix (step 4):
        ("MetaX C500", "metax", 57, False, "c500"),
        ("Meta X C500", "metax", 57, False, "meta-x-c500"),
        # Separators never lead or repeat; one trailing separator is dropped (steps 3 and 5).
        ("  --a..b__c--", "", 0, False, "a.b_c"),
        # maxLength stops the walk; the trailing separator left at the cut is dropped.
        ("abc def", "", 4, False, "abc"),
        ("Ünïcode GPU", "", 0, False, "ncode-gpu"),
        ("AMD EPYC 7763 64-Core Processor", "amd", 59, True, "epyc-7763"),
    ],
    ids=[
        "a10g",
        "tesla-t4",
        "underscore-kept",
        "one-word-brand-stripped",
        "two-word-brand-kept",
        "separators",
        "max-length",
        "non-ascii-dropped",
        "strip-cruft",
    ],
)
def test_normalize_name(name: str, prefix: str, max_length: int, strip: bool, expected: str) -> None:
    assert normalize_name(name, prefix, max_length, strip) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("NVIDIA A10G", "NVIDIA-A10G"),
        ("Tesla T4", "Tesla-T4"),
        ("", ""),
        ("580.159.03", "580.159.03"),
        ("GC 11.0.0", "GC-11.0.0"),
        ("-_AMD  Radeon (TM)-", "AMD-Radeon-TM"),
        ("x" * 70, "x" * 63),
    ],
    ids=["a10g", "tesla-t4", "empty", "driver-version", "family", "separators-and-symbols", "cap-63"],
)
def test_sanitize_label_value(value: str, expected: str) -> None:
    assert sanitize_label_value(value) == expected
