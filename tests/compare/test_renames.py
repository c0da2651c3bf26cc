"""Renamed kernel families (perfgate.compare.renames) on real captures re-timed by the shared
scenarios tool: a family renamed one to one (same calls, Type, core and time) is reported as
renamed and fails nothing; names that only gain a volatile part keep their family; a family
dropped while another of different calls appears, two look-alike renames, or a renamed family
whose time moved beyond the noise are not paired."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import _need
from perfgate import terms
from perfgate.compare import compare_fingerprints
from perfgate.compare.renames import RENAME_TIME_NOISE, Rename, apply_renames, find_renames
from perfgate.app.run import fingerprint_paths

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PERFGATE_SHARED", REPO.parent / "shared"))
TOOL = SHARED / "tools" / "scenarios"
LEVEL1 = "level1"
MID = "aclnnAdaptiveAvgPool2d_TransposeAiCore_Transpose"   # auto_mid_compute of level1 rank 0
TWIN = "aclnnAdaptiveAvgPool2dBackward_TransposeAiCore_Transpose"   # same calls, Type, core, time
TOP = "trans_TransData"   # in the Top-10, 42 calls per step, rows named trans_TransData_<n>


@pytest.fixture(scope="module")
def scenarios():
    _need(TOOL / "scenarios.py")
    sys.path.insert(0, str(TOOL))
    try:
        import scenarios as mod
    finally:
        sys.path.remove(str(TOOL))
    return mod


@pytest.fixture(scope="module")
def rank0(text_captures) -> Path:
    return _need(text_captures / LEVEL1 / "rank0_ascend_pt")


@pytest.fixture(scope="module")
def base(rank0, policy, tmp_path_factory):
    """The unchanged rank folder, fingerprinted once (a capture folder holding only it)."""
    cap = tmp_path_factory.mktemp("base")
    (cap / rank0.name).symlink_to(rank0, target_is_directory=True)
    return fingerprint_paths(cap, policy, workers=1)


@pytest.fixture(scope="module")
def plain(scenarios, rank0, base, policy, tmp_path_factory):
    """{family: (summary, candidate fingerprint, comparisons)} of a plain rename of MID and of TOP,
    made and fingerprinted once for the tests that read them."""
    out = {}
    for family in (MID, TOP):
        cap, summary = _make(scenarios, rank0, tmp_path_factory.mktemp("plain"), "rename", family=family,
                             kind="plain")
        out[family] = (summary, *_compare(base, cap, policy))
    return out


def _make(scenarios, src: Path, tmp: Path, scenario: str, **params) -> tuple[Path, dict]:
    """Write one scenario capture of ``src`` (a rank folder) under ``tmp``: (capture, summary)."""
    cap = tmp / f"{scenario}-{len(list(tmp.iterdir()))}"
    summary = scenarios.make(src, cap, scenario, params=params)
    return cap, summary


def _compare(base, cap, policy):
    cand = fingerprint_paths(cap, policy, workers=1)
    out, _ = compare_fingerprints(base, cand, policy)
    return cand, out


def _families(fp) -> set:
    return {m.labels["family"] for m in fp.metrics.values() if m.name == "kernel.calls_per_step"}


def _failing(out, *families) -> list:
    return [c.key for c in out if c.fails and (not families or c.labels.get("family") in families)]


@pytest.mark.parametrize("family", [MID, TOP])
def test_plain_rename_is_one_rename_and_fails_nothing(plain, base, policy, family):
    """MID (2 calls per step, outside the Top-10) and TOP (42 calls, in the Top-10, its rows
    keeping their numeric suffixes) renamed: exactly one Rename, and no failing comparison of
    either family once it is applied."""
    summary, cand, out = plain[family]
    new = summary["families"][1]
    # compare_fingerprints pairs them itself: the new name's comparisons say so and none fails
    assert any(c.labels.get("family") == new and c.reason.startswith("renamed:") for c in out)
    renames = find_renames(base, cand, policy.gate_views)
    assert [(r.old, r.new) for r in renames] == [(family, new)]
    r = renames[0]
    fam = next(f for f in base.detail["operators"]["families"] if f["family"] == family)
    assert r.calls_per_step == fam["calls_per_step"] and r.time_base_us == pytest.approx(r.time_cand_us)
    got = apply_renames(out, renames)
    assert len(got) == len(out) and [c.key for c in got] == [c.key for c in out]
    assert not _failing(got, family, new)
    assert not _failing(got), "a one-to-one rename alone is a PASS (CATALOGUE.md)"
    touched = [c for c in got if c.labels.get("family") in (family, new)]
    assert {c.name for c in touched} >= {"kernel.calls_per_step", "share.family"}
    for c in touched:
        assert (c.verdict, c.gated, c.fails) == (terms.UNCHANGED, False, False)
        assert c.reason.startswith(f"renamed: {family} -> {new} (same calls, Type, core; ΣDuration ")
        assert " us/step)" in c.reason
    for c, was in zip(got, out):   # nothing else is touched (total calls, optype counts, steps)
        if c.labels.get("family") not in (family, new) and c.name != "kernel.topn":
            assert c is was
    if family == TOP:   # a Top-10 family: the set differs only by the rename
        topn = [c for c in got if c.name == "kernel.topn" and c.labels.get("view") in policy.gate_views]
        assert topn and all(c.verdict == terms.UNCHANGED and not c.fails for c in topn)
        assert all(f"{family} -> {new}" in c.reason for c in topn)


@pytest.mark.parametrize("family", [TOP])
@pytest.mark.parametrize("kind", ["hex64", "triton_config"])
def test_volatile_renames_keep_the_family(scenarios, rank0, base, policy, tmp_path, family, kind):
    """A hex hash or a Triton config appended to the name (on trans_TransData followed by the
    row's numeric suffix, ``trans_TransData_<hash>_12``) leaves the family as it was: nothing to
    pair."""
    cap, summary = _make(scenarios, rank0, tmp_path, "rename", family=family, kind=kind)
    assert summary["params"]["new"] != family
    cand, out = _compare(base, cap, policy)
    assert _families(cand) == _families(base)
    assert find_renames(base, cand, policy.gate_views) == []
    assert not _failing(out)


@pytest.mark.parametrize("family", [MID, TOP])
def test_inductor_hash_rename_is_paired(scenarios, rank0, base, policy, tmp_path, family):
    """A family renamed to an inductor kernel name with a build hash (and, on trans_TransData,
    the row's numeric suffix after the hash) is one family under a new name: paired."""
    cap, summary = _make(scenarios, rank0, tmp_path, "rename", family=family, kind="inductor_hash")
    cand, out = _compare(base, cap, policy)
    new = sorted(_families(cand) - _families(base))
    assert len(new) == 1 and new[0].startswith("triton_poi_fused_") and new[0] in summary["params"]["new"]
    assert len(new[0]) < len(summary["params"]["new"])   # the hash and the index went
    renames = find_renames(base, cand, policy.gate_views)
    assert [(r.old, r.new) for r in renames] == [(family, new[0])]
    assert not _failing(apply_renames(out, renames), family, new[0])


def test_drop_and_new_family_of_other_calls_are_not_paired(scenarios, rank0, base, policy, tmp_path):
    """One family dropped (MID, 2 calls per step) while a new kernel of the same Type and core
    follows another family (aclnnMuls_MulAiCore_Mul, 18 calls) is gone + new, not a rename."""
    mid, _ = _make(scenarios, rank0, tmp_path, "drop_family", family=MID)
    cap, summary = _make(scenarios, mid / rank0.name, tmp_path, "new_family",
                         family="aclnnMuls_MulAiCore_Mul", new="aclnnGeluV2_GeluV2AiCore_GeluV2")
    cand, out = _compare(base, cap, policy)
    assert _families(base) - _families(cand) == {MID}
    assert _families(cand) - _families(base) == {"aclnnGeluV2_GeluV2AiCore_GeluV2"}
    assert find_renames(base, cand, policy.gate_views) == []
    assert apply_renames(out, []) == out


def test_look_alike_renames_are_ambiguous(scenarios, rank0, base, policy, tmp_path):
    """MID and TWIN have equal calls, Type, core and ΣDuration (50.04 vs 49.88 us): renamed
    both, each gone family matches both new ones, so neither is paired."""
    one, _ = _make(scenarios, rank0, tmp_path, "rename", family=MID, kind="plain")
    cap, _ = _make(scenarios, one / rank0.name, tmp_path, "rename", family=TWIN, kind="plain")
    cand, out = _compare(base, cap, policy)
    assert len(_families(base) - _families(cand)) == 2 and len(_families(cand) - _families(base)) == 2
    assert find_renames(base, cand, policy.gate_views) == []


@pytest.mark.parametrize("factor, paired", [(1.0 + RENAME_TIME_NOISE - 0.05, True),
                                            (1.0 + RENAME_TIME_NOISE + 0.15, False)])
def test_renamed_family_whose_time_moved(scenarios, rank0, plain, base, policy, tmp_path, factor, paired):
    """Renamed and then x factor: within the noise it is still the same kernel; beyond it the new
    family's time is judged as a new family's."""
    summary = plain[TOP][0]
    new = summary["families"][1]
    cap, _ = _make(scenarios, Path(summary["rank_dir"]), tmp_path, "family_factor", family=new, factor=factor)
    cand, _ = _compare(base, cap, policy)
    got = find_renames(base, cand, policy.gate_views)
    assert [(r.old, r.new) for r in got] == ([(TOP, new)] if paired else [])
    if paired:
        assert got[0].time_cand_us / got[0].time_base_us == pytest.approx(factor, rel=0.01)


def test_other_type_or_unknown_type_is_not_paired(plain, base, policy):
    """The same rename, with the candidate's family view giving the new family another Type, or
    no Type (N/A, as at Level0): not the same operator, not paired."""
    summary, cand, _ = plain[MID]
    new = summary["families"][1]
    assert len(find_renames(base, cand, policy.gate_views)) == 1
    for op_type in ("TransposeD", "n/a"):
        ops = dict(cand.detail["operators"])
        ops["families"] = [dict(f, op_type=op_type) if f["family"] == new else f for f in ops["families"]]
        other = replace(cand, detail=dict(cand.detail, operators=ops))
        assert find_renames(base, other, policy.gate_views) == []


def test_layer_classes_of_a_renamed_family(plain, base, policy):
    """TOP runs in every conv layer: renamed, the layer classes holding it get new ids, as many
    layers of the new classes as of the gone ones: renamed with it, not judged."""
    summary, cand, out = plain[TOP]
    got = apply_renames(out, find_renames(base, cand, policy.gate_views))
    assert not _failing(got)
    renamed = [c for c in got if c.name == "layer.class_count" and "a layer class renamed" in c.reason]
    assert renamed and not any(c.gated for c in renamed)


def test_incomparable_and_topn_of_other_changes_are_kept():
    """apply_renames on hand-made comparisons: an incomparable one of a renamed family is
    unchanged and says why it was not compared; a Top-N whose difference is more than the rename
    stays a regression; counts without a family are left alone."""
    from perfgate.model import Comparison
    r = Rename("k_old", "k_new", 2.0, 10.0, 10.5)

    def comp(name, labels, verdict, fails, b=None, c=None):
        return Comparison(key=name, name=name, labels=labels, verdict=verdict, gated=True, fails=fails,
                          baseline=b, candidate=c, unit="set", caliber=None, tier=1, delta=None,
                          delta_rel=None, tolerance="", reason=f"{name}: why", subject=name)
    inc = comp("kernel.time_us", {"family": "k_old", "view": "rank0"}, terms.INCOMPARABLE, False)
    topn_more = comp("kernel.topn", {"view": "rank0"}, terms.REGRESSION, True, ["a", "k_old"], ["b", "k_new"])
    topn_rename = comp("kernel.topn", {"view": "p50"}, terms.REGRESSION, True, ["a", "k_old"], ["a", "k_new"])
    total = comp("kernel.total_calls_per_step", {"view": "rank0"}, terms.REGRESSION, True)
    got = apply_renames([inc, topn_more, topn_rename, total], [r])
    assert (got[0].verdict, got[0].gated, got[0].fails) == (terms.UNCHANGED, False, False)
    assert got[0].reason.startswith("renamed: k_old -> k_new (same calls, Type, core; ΣDuration 10.000 -> 10.500 us/step)")
    assert got[0].reason.endswith("(before pairing not compared: why)")
    assert got[1] is topn_more and got[3] is total
    assert (got[2].verdict, got[2].fails, got[2].gated) == (terms.UNCHANGED, False, True)
    assert "k_old -> k_new" in got[2].reason


def test_no_pairing_between_other_family_rules(plain, base, policy):
    """Fingerprints made under other family rules (or rank sets) have incomparable families:
    nothing is paired there."""
    cand = plain[MID][1]
    assert len(find_renames(base, cand, policy.gate_views)) == 1
    for facet, value in (("family_suffix", "(?:_+\\d+)+$"), ("world_size", 8)):
        other = replace(cand, config=dict(cand.config, **{facet: value}))
        assert find_renames(base, other, policy.gate_views) == []
