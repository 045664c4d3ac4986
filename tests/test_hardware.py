"""Accelerator table: required devices, units (GiB memory, decimal bandwidth), lookup and errors."""

import dataclasses
import re

import pytest

from kvsim.calc.hardware import (
    Accelerator,
    accelerator_names,
    accelerators,
    get_accelerator,
)

GiB = 2**30


def test_required_gpus_with_their_datasheet_numbers():
    expected = {  # name: (marketed GB, bandwidth GB/s)
        "A100 40GB": (40, 1555), "A100 80GB": (80, 2039), "H100 80GB": (80, 3350), "H200 141GB": (141, 4800),
        "L4": (24, 300), "RTX 4090": (24, 1008),
    }
    for name, (gb, bw) in expected.items():
        acc = get_accelerator(name)
        assert acc.kind == "gpu" and acc.memory_bytes == gb * GiB and acc.bandwidth_gb_per_s == bw


def test_a100_40gb_is_the_40960_mib_nvidia_smi_shows():
    assert get_accelerator("A100 40GB").memory_bytes == 40960 * 2**20


def test_macs_cover_the_usual_unified_memory_sizes():
    sizes = {round(a.memory_gib) for a in accelerators("apple-silicon")}
    assert {16, 24, 32, 36, 48, 64, 96, 128, 192, 512} <= sizes
    assert get_accelerator("M3 Ultra 512GB").bandwidth_gb_per_s == 819
    assert get_accelerator("M4 Max 128GB").bandwidth_gb_per_s == 546
    assert get_accelerator("M4 Max 36GB").bandwidth_gb_per_s == 410  # the binned chip is slower


@pytest.mark.parametrize("acc", accelerators(), ids=lambda a: a.name)
def test_every_entry_is_consistent(acc):
    assert acc.kind in ("gpu", "apple-silicon") and acc.source
    marketed = int(re.match(r"(\d+) GB", acc.memory_marketed).group(1))
    assert acc.memory_bytes == marketed * GiB  # marketed GB stored as GiB
    assert acc.memory_bytes > 0 and acc.memory_bandwidth_bytes_per_s >= 50 * 10**9
    assert acc.kind == "gpu" or acc.name.endswith(f" {marketed}GB")


def test_names_are_unique_after_normalising():
    keys = [n.lower().replace(" ", "").replace("-", "").replace("_", "") for n in accelerator_names()]
    assert len(keys) == len(set(keys)) == len(accelerators())


@pytest.mark.parametrize("spelling", ["A100 80GB", "a100 80gb", "a100-80gb", "A100_80GB", " a100 80GB "])
def test_lookup_ignores_case_spaces_hyphens_underscores(spelling):
    assert get_accelerator(spelling) is get_accelerator("A100 80GB")


def test_unknown_accelerator_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        get_accelerator("B200")
    message = str(err.value)
    assert "'B200'" in message and all(n in message for n in accelerator_names()) and "\n" not in message


def test_accelerator_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_accelerator("L4").memory_bytes = 1


def test_seconds_to_read_the_weights_of_llama_3_8b_on_an_h100():
    from kvsim.calc.registry import load_model
    from kvsim.calc.weights import weights_bytes
    h100 = get_accelerator("H100 80GB")
    t = h100.seconds_to_read(weights_bytes(load_model("llama-3-8b")))
    assert t == pytest.approx(16_060_522_496 / 3.35e12) and 0.004 < t < 0.005  # ~4.8 ms per decode step


def test_accelerator_from_fields():
    acc = Accelerator(name="x", kind="gpu", memory_bytes=GiB, memory_bandwidth_bytes_per_s=10**9)
    assert acc.memory_gib == 1 and acc.seconds_to_read(2 * 10**9) == 2
