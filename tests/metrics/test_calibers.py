"""Every time figure names its caliber truthfully: a step's time, its Free time, its bubble and
underfeed are *elapsed* (idle time included), not busy union; the kernel-derived uncovered
communication ``comm.exposed_us`` is ΣDuration-based. Checked on the registry, on a real
fingerprint (elapsed >= busy union per step) and in the Markdown report."""
from __future__ import annotations

import pytest

from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.metrics import registry
from perfgate.report import render_markdown
from perfgate.app.run import fingerprint_path
from perfgate.store.baselines import BaselineStore
from perfgate.synth.writer import SynthSpec, write_capture

ELAPSED = ("step.time_us", "step.free_us", "step.bubble_us", "step.underfeed_ratio",
           # spans between two instants and idle gaps: elapsed time too (they
           # had no caliber at all)
           "step.wall_us", "step.prelaunch_gap_us", "step.tail_gap_us", "step.internal_bubble_us",
           "step.largest_bubble_us", "layer.wall_p50_us")
BUSY = ("step.computing_us", "step.comm_us", "step.comm_not_overlapped_us", "step.overlapped_us",
        "step.exposed_comm_ratio")


def test_registry_calibers():
    for name in ELAPSED:
        assert registry.get(name).caliber == terms.ELAPSED, name
    for name in BUSY:
        assert registry.get(name).caliber == terms.BUSY_UNION, name
    assert registry.get("comm.exposed_us").caliber == terms.SUM_DURATION
    assert terms.CALIBER_LABEL[terms.ELAPSED] == "elapsed"


def test_every_time_metric_names_a_caliber():
    """No metric in us (a time figure) is left without a caliber (device.time_us carries its
    caliber per value, as a label)."""
    bare = [d.name for d in registry.REGISTRY.values()
            if d.unit == "us" and d.caliber is None and "caliber" not in (d.labels or ())]
    assert bare == []


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_real_step_time_is_elapsed_and_at_least_its_busy_union(text_captures, policy, level):
    fp = fingerprint_path(text_captures / level, policy, workers=1)
    for view in ("rank0", "p50"):
        t = fp.metrics[f"step.time_us{{view={view}}}"]
        assert t.caliber == terms.ELAPSED
        busy = (fp.metrics[f"step.computing_us{{view={view}}}"].value
                + fp.metrics[f"step.comm_not_overlapped_us{{view={view}}}"].value)
        free = fp.metrics[f"step.free_us{{view={view}}}"]
        assert free.caliber == terms.ELAPSED
        assert fp.metrics[f"step.computing_us{{view={view}}}"].caliber == terms.BUSY_UNION
        assert t.value >= busy - 1e-6            # medians of per-step sums: elapsed = busy union + Free
        assert free.value >= 0


def test_markdown_names_step_time_elapsed(policy, tmp_path):
    """A bubble added to every step moves the step time: its row says elapsed, the compute busy
    union's row (unchanged work) says busy union."""
    store = BaselineStore(tmp_path / "b")
    save_baseline(write_capture(tmp_path / "base", SynthSpec()), "main", policy=policy, store=store)
    r = check(write_capture(tmp_path / "cand", SynthSpec(bubble_us=3000.0)), "main", policy=policy, store=store,
              env={})
    moved = [c for c in r.comparisons if c.name == "step.time_us" and c.verdict == terms.REGRESSION]
    assert moved and all(c.caliber == terms.ELAPSED for c in moved)
    md = render_markdown(r)
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "step.time_us{" in ln]
    assert rows and all("| elapsed |" in ln for ln in rows), rows[:3]
