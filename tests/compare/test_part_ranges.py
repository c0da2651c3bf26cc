"""The own times a device-wide speed factor explains for a derived part
(perfgate.compare.parts.range_of), anchored at the baseline's own time of that part."""
import pytest

from perfgate.compare.parts import range_of

EXPOSED, IDLE = "step.exposed_comm_ratio", "step.underfeed_ratio"


def test_an_unchanged_device_explains_exactly_the_baseline_exposed_communication():
    """A pipeline stage's p50 of communication and of overlap is not the p50 of their difference:
    135 us exposed with comm 400 and overlap 180 (400 − 180 = 220). At s = 1 the range is 135 itself."""
    assert range_of(EXPOSED, 135.0, 1.0, comm=400.0, overlap=180.0) == (135.0, 135.0)


def test_a_slower_device_widens_exposed_communication_by_its_components():
    """Compute twice as slow (s = 2): communication may take up to twice as long, the overlap it
    hid stays at most what it was, so exposed time may move between 135 − 180 and 135 + 400."""
    lo, hi = range_of(EXPOSED, 135.0, 2.0, comm=400.0, overlap=180.0)
    assert (lo, hi) == (0.0, 535.0)


def test_where_the_components_subtract_exactly_the_range_is_the_components_range():
    """tb = comm − overlap: the anchored range equals [min(1,s)·comm − max(1,s)·overlap,
    max(1,s)·comm − min(1,s)·overlap]."""
    comm, overlap = 400.0, 180.0
    for s in (0.5, 0.8, 1.0, 1.3, 2.0):
        lo_s, hi_s = min(1.0, s), max(1.0, s)
        lo, hi = range_of(EXPOSED, comm - overlap, s, comm=comm, overlap=overlap)
        assert lo == pytest.approx(max(0.0, lo_s * comm - hi_s * overlap))
        assert hi == pytest.approx(hi_s * comm - lo_s * overlap)


def test_idle_and_a_plain_share_part_are_anchored_at_the_baseline_too():
    assert range_of(IDLE, 50.0, 1.0, busy=1000.0) == (50.0, 50.0)
    assert range_of(IDLE, 50.0, 0.8, busy=1000.0) == pytest.approx((50.0, 250.0))
    assert range_of("share.family", 300.0, 1.5) == (300.0, 450.0)
