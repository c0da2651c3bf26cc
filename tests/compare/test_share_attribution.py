"""Which kernel families explain a share's change (perfgate.compare.attribution): only those
inside the part for a share that rose, only those outside it for one that fell. On the
LLM capture hcom_allReduce ×3 and MatMulV3 ×1.5 made
``share.family{family=hcom_allReduce}`` fail with "Kernel families that grew most:
aclnnMatmul_MatMulV3Common_MatMulV3 (+24,000 us)", leaving out hcom_allReduce's own +80,685 us."""
import dataclasses

from perfgate import terms
from perfgate.compare.attribution import attribute_families
from perfgate.model import Comparison
from tests.compare.test_verdict_rules import fp, mv

MM, AR, ADD = "aclnnMatmul_MatMulV3Common_MatMulV3", "hcom_allReduce", "aclnnAdd_AddAiCore_Add"


def _side(mm, ar, add):
    f = fp(*(mv("kernel.time_us", v, tier=3, family=n) for n, v in ((MM, mm), (AR, ar), (ADD, add))),
           *(mv("kernel.calls_per_step", 10.0, unit="calls", tier=1, family=n) for n in (MM, AR, ADD)))
    fams = [{"family": MM, "category": "MatMul", "core_type": "AI_CORE", "phase": "all"},
            {"family": AR, "category": "Comm", "core_type": "HCCL", "phase": "all"},
            {"family": ADD, "category": "Vector", "core_type": "AI_VECTOR_CORE", "phase": "all"}]
    return dataclasses.replace(f, detail={"operators": {"families": fams}})


BASE, CAND = _side(50_000.0, 40_000.0, 1_000.0), _side(74_000.0, 120_685.0, 1_200.0)


def _cmp(name, delta, **labels):
    return Comparison(key=name, name=name, labels=dict(labels, view="rank0"), verdict=terms.REGRESSION,
                      gated=True, fails=True, baseline=0.1, candidate=0.1 + delta, unit="ratio",
                      caliber=terms.SUM_DURATION, tier=2, delta=delta, delta_rel=None, tolerance="±2 pp",
                      reason="r", evidence="e")


def _names(c):
    return [r["family"] for r in attribute_families(c, BASE, CAND).attribution or ()]


def test_a_communication_familys_own_share_is_explained_by_itself():
    assert _names(_cmp("share.family", 0.0982, family=AR)) == [AR]


def test_a_rising_category_share_lists_its_own_families_only():
    assert _names(_cmp("share.category", 0.03, category="MatMul")) == [MM]
    assert _names(_cmp("share.core_type", 0.05, core_type="HCCL")) == [AR]


def test_a_falling_share_lists_the_families_outside_it():
    # MatMul's share fell (exact direction): the growth of the others explains it, largest first
    assert _names(_cmp("share.category", -0.06, category="MatMul")) == [AR, ADD]


def test_other_aggregates_keep_their_scope():
    c = dataclasses.replace(_cmp("step.time_us", 5000.0), unit="us", caliber=terms.ELAPSED)
    assert _names(c) == [AR, MM, ADD]
