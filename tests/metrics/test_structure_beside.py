"""The structure stage of a large kernel table computed in a thread beside the rest of its rank's
load and summary (``perfgate.metrics.fingerprint.structure_beside``, started by
``perfgate.app.run._summarize_location`` through ``load_rank(after_kernels=...)``): the same
fingerprint as one thread on every readable real capture, the same first error, nothing left
running after a refused rank, and no thread with ``--workers 1`` or one usable CPU."""
from __future__ import annotations

import threading

import pytest

import perfgate.metrics.fingerprint as F
import perfgate.app.run as run
from perfgate.errors import InvalidCaptureError
from perfgate.app.run import fingerprint_path
from perfgate.synth.replicate import replicate_rank

# every readable real capture (tests/app/test_sweep.py OK), the DB exports excepted: they have no
# kernel CSV, so no thread is started for them
REAL = ["msinsight/test/data/pytorch/text/level0", "msinsight/test/data/pytorch/text/level1",
        "msinsight/test/data/pytorch/text/level2", "msinsight/test/st/level2",
        "vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache/PROF_000001_20260823165523228_00627338KRCOPCPN",
        "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization/"
        "PROF_000001_20260823165326062_00625538CIGQAHCJ"]


def _strip(fp):
    return ({k: v.to_dict() for k, v in fp.metrics.items()}, sorted(repr(c.to_dict()) for c in fp.self_checks),
            sorted(repr(f.to_dict()) for f in fp.findings), fp.config, fp.detail, sorted(fp.warnings))


@pytest.fixture
def started(monkeypatch):
    """Every kernel table large enough (threshold 0), two usable CPUs, and each thread's result
    recorded (stages it computed)."""
    monkeypatch.setattr(F, "STRUCTURE_BESIDE_ROWS", 0)
    monkeypatch.setattr(run, "usable_cpus", lambda: 2)
    out = []
    orig = F.structure_beside

    def recording(*a, **k):
        r = orig(*a, **k)
        out.append(r)
        return r
    monkeypatch.setattr(F, "structure_beside", recording)
    return out


def _structure_threads():
    return [t for t in threading.enumerate() if t.name.startswith("perfgate-structure")]


@pytest.mark.parametrize("capture", REAL)
def test_every_real_capture_gives_the_one_thread_fingerprint(capture, ascend, policy, started):
    root = ascend / capture
    one = fingerprint_path(root, policy, workers=1, with_trace="read")
    assert not started                                       # --workers 1: one thread
    two = fingerprint_path(root, policy, with_trace="read")
    assert started and all(s is not None for s in started)
    assert all("segments" in s and "error" not in s for s in started)   # the thread did the stage
    assert _strip(two) == _strip(one)
    assert not _structure_threads()


def test_many_step_replica_gives_the_one_thread_fingerprint(ascend, policy, started, tmp_path):
    cap = replicate_rank(ascend / "msinsight/test/st/level2/rank_0_ascend_pt", tmp_path / "r", steps=6)
    assert _strip(fingerprint_path(cap, policy, with_trace="never")) == \
        _strip(fingerprint_path(cap, policy, workers=1, with_trace="never"))
    assert len(started) == 1


def test_small_tables_and_one_cpu_stay_in_one_thread(text_captures, policy, monkeypatch):
    calls = []
    monkeypatch.setattr(F, "structure_beside", lambda *a, **k: calls.append(a) or pytest.fail("thread"))
    monkeypatch.setattr(run, "usable_cpus", lambda: 1)
    fingerprint_path(text_captures / "level1", policy, with_trace="never")
    assert not calls
    monkeypatch.undo()
    # below STRUCTURE_BESIDE_ROWS: structure_beside is asked and declines
    assert F.STRUCTURE_BESIDE_ROWS == 100_000
    monkeypatch.setattr(run, "usable_cpus", lambda: 2)
    seen = []
    orig = F.structure_beside
    monkeypatch.setattr(F, "structure_beside", lambda *a, **k: seen.append(orig(*a, **k)) or seen[-1])
    fingerprint_path(text_captures / "level1", policy, with_trace="never")
    assert seen and all(s is None for s in seen)


def _fail_with(monkeypatch, name, exc):
    monkeypatch.setattr(F, name, lambda *a, **k: (_ for _ in ()).throw(exc))


@pytest.mark.parametrize("failing", [("cat",), ("segments",), ("view",), ("segments", "view"), ("cat", "view")])
def test_the_first_error_is_the_one_thread_error(text_captures, policy, started, monkeypatch, failing):
    """Structure (in the thread) and the family view (here) both failing: the error one thread
    meets first is raised (categories, then structure, then the view)."""
    errors = {s: InvalidCaptureError(f"{s} failed", path=text_captures / "level1") for s in failing}
    names = {"cat": None, "segments": "_segment_summary_of", "view": "_family_view"}
    if "cat" in errors:
        import perfgate.metrics.kernels as km
        monkeypatch.setattr(km, "categorize", lambda *a, **k: (_ for _ in ()).throw(errors["cat"]))
    for s in ("segments", "view"):
        if s in errors:
            _fail_with(monkeypatch, names[s], errors[s])
    first = next(s for s in ("cat", "segments", "view") if s in errors)
    for workers in (1, None):
        with pytest.raises(InvalidCaptureError) as e:
            fingerprint_path(text_captures / "level1", policy, workers=workers, with_trace="never")
        assert f"{first} failed" in str(e.value), workers
    assert started
    assert not _structure_threads()


def test_a_rank_refused_after_its_kernel_table_leaves_no_thread(copy_capture, policy, started):
    """communication.json is read after the thread starts: refusing it joins the thread."""
    cap = copy_capture("level1")
    for cm in cap.rglob("communication.json"):
        cm.write_text('{"step1": ' + cm.parent.parent.name)   # not JSON (and each rank's its own)
    with pytest.raises(InvalidCaptureError) as e:
        fingerprint_path(cap, policy, with_trace="never")
    assert "communication.json" in str(e.value)
    assert started
    assert not _structure_threads()


def test_the_summary_waits_for_the_stage_it_needs(text_captures, policy, started, monkeypatch):
    """A slow structure stage: the summary waits for it (never computes it a second time)."""
    import time
    real = F._segment_summary_of
    calls = []

    def slow(*a, **k):
        calls.append(threading.current_thread().name)
        time.sleep(0.3)
        return real(*a, **k)
    monkeypatch.setattr(F, "_segment_summary_of", slow)
    two = fingerprint_path(text_captures / "level1", policy, with_trace="never")
    assert calls and all(n.startswith("perfgate-structure") for n in calls)   # never in this thread
    monkeypatch.setattr(F, "_segment_summary_of", real)
    assert _strip(two) == _strip(fingerprint_path(text_captures / "level1", policy, workers=1, with_trace="never"))
