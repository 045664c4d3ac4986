"""Copy-bandwidth measurement: the bytes it counts, best-of timing, and one-line errors."""

import pytest

from kvsim.measure.bandwidth import MiB, Throughput, measure_copy_bandwidth


def test_copy_counts_read_and_write_and_takes_the_fastest_run():
    result = measure_copy_bandwidth(MiB, repeats=3)
    assert result.work == 2 * MiB                          # every byte read once and written once
    assert len(result.seconds) == 3 and all(s > 0 for s in result.seconds)
    assert result.best_seconds == min(result.seconds)
    assert result.rate == pytest.approx(2 * MiB / min(result.seconds))
    assert result.rate > 10**7                             # any machine copies more than 10 MB/s


def test_odd_sizes_are_rounded_down_to_whole_float32_elements():
    assert measure_copy_bandwidth(4096 + 3, repeats=1).work == 2 * 4096


def test_throughput_rate_is_work_over_the_fastest_run():
    t = Throughput("bytes", 1000, (0.5, 0.25, 1.0))
    assert t.best_seconds == 0.25 and t.rate == 4000


@pytest.mark.parametrize("kwargs,field", [({"nbytes": 100}, "nbytes"), ({"nbytes": 2.5e6}, "nbytes"),
                                          ({"repeats": 0}, "repeats"), ({"repeats": True}, "repeats")])
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field) as err:
        measure_copy_bandwidth(**{"nbytes": MiB, **kwargs})
    assert len(str(err.value).splitlines()) == 1
