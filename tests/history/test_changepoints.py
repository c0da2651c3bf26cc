"""Change points of a history series (PELT): a spurious second cut does not hide a real shift."""
from __future__ import annotations




def test_a_spurious_second_cut_does_not_hide_a_real_shift():
    """12 runs, a +48 % step at run 7 on a very quiet p50 series. PELT cut it
    at 6 and again at 9; the real cut was then tested on runs 7-9 only (6 against 3 runs: the rank
    test cannot reach alpha 0.01) and dropped together with the spurious one, so `history trend`
    reported no change point on the p50 view while the rank0 view had one. A failed cut is now
    dropped first and the others are tested again over the merged segments."""
    import pandas as pd
    from perfgate.history.changepoints import change_points
    y = [0.416, 0.418, 0.420, 0.420, 0.417, 0.419, 0.619, 0.622, 0.620, 0.624, 0.624, 0.624]
    series = pd.DataFrame({"run_id": range(1, 13), "commit": [f"c{i}" for i in range(12)], "value": y})
    cps = change_points(series, "share.family{view=p50}")
    assert [(c.index, c.run_id, c.n_before, c.n_after) for c in cps] == [(6, 7, 6, 6)]
    assert cps[0].p_value < 0.01 and cps[0].rel_change > 0.4
    flat = pd.DataFrame({"run_id": range(1, 13), "commit": [f"c{i}" for i in range(12)],
                         "value": [0.416, 0.418, 0.420, 0.420, 0.417, 0.419] * 2})
    assert change_points(flat, "k") == []
