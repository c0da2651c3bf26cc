"""A median layer wall is compared only where the layers are a repeated unit (rules
``_layers_not_repeated``): the bundled demo's synthetic steps have no recurring layer, so a
kernel added anywhere moves the layer boundaries, and a slower model read as a "-36 % median
layer wall" improvement. A transformer whose layers recur is still compared."""
import dataclasses

import pytest

from perfgate import terms
from perfgate.compare import compare_fingerprints
from perfgate.policy import load_policy
from perfgate.app.run import fingerprint_path
from perfgate.synth import write_demo_pair
from perfgate.synth.transformer import write_transformer
from tests.compare.test_verdict_rules import fp, mv


def _walls(cmps):
    return {c.key: c for c in cmps if c.name == "layer.wall_p50_us"
            or (c.name == "rank.skew_ratio" and c.labels.get("metric") == "layer.wall_p50_us")}


def test_demo_layer_wall_is_not_called_a_gain(tmp_path):
    pol = load_policy(None)
    base, cand = write_demo_pair(tmp_path)
    b, c = (fingerprint_path(p, pol, with_trace=False) for p in (base, cand))
    walls = _walls(compare_fingerprints(b, c, pol)[0])
    assert walls and all(x.verdict == terms.INCOMPARABLE for x in walls.values()), \
        {k: (x.verdict, x.reason) for k, x in walls.items()}
    for x in walls.values():
        assert "do not repeat in the baseline" in x.reason and "4 of 4 layers" in x.reason
        assert "the boundaries moved" in x.reason
        assert not x.fails


def test_recurring_layers_are_compared(tmp_path):
    pol = load_policy(None)
    b = fingerprint_path(write_transformer(tmp_path / "b", 8, seed=1), pol, with_trace=False)
    c = fingerprint_path(write_transformer(tmp_path / "c", 8, seed=2,
                                           slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.4}), pol,
                         with_trace=False)
    walls = _walls(compare_fingerprints(b, c, pol)[0])
    views = {x.labels.get("view") for x in walls.values() if x.name == "layer.wall_p50_us"}
    assert {"rank0", "p50"} <= views
    for x in walls.values():
        if x.name == "layer.wall_p50_us":
            assert x.verdict != terms.INCOMPARABLE, x.reason
            assert x.candidate > x.baseline   # slower matmuls: longer layers


@pytest.mark.parametrize("side,unique,expect", [("baseline", 3, "3 of 4"), ("candidate", 3, "3 of 4"),
                                                 ("baseline", 2, None), ("candidate", 0, None)])
def test_unique_share_threshold(pol_default, side, unique, expect):
    def side_fp(u):
        return fp(mv("layer.wall_p50_us", 1000.0, caliber=terms.ELAPSED, tier=3, **{"pass": "forward"}),
                  mv("layer.class_count", float(u), unit="layers", tier=1, **{"class": "unique", "pass": "forward"}),
                  mv("layer.class_count", float(4 - u), unit="layers", tier=1, **{"class": "Labc", "pass": "forward"}))
    base = side_fp(unique if side == "baseline" else 0)
    cand = side_fp(unique if side == "candidate" else 0)
    cand.metrics[next(k for k in cand.metrics if k.startswith("layer.wall"))] = mv(
        "layer.wall_p50_us", 600.0, caliber=terms.ELAPSED, tier=3, **{"pass": "forward"})[1]
    (w,) = _walls(compare_fingerprints(base, cand, pol_default)[0]).values()
    if expect:
        assert w.verdict == terms.INCOMPARABLE and f"in the {side} ({expect} layers" in w.reason
    else:
        assert w.verdict == terms.IMPROVEMENT   # -40 % beyond ±25 %: recurring layers are compared


def test_without_class_counts_compares_as_before(pol_default):
    base = fp(mv("layer.wall_p50_us", 1000.0, caliber=terms.ELAPSED, tier=3, **{"pass": "forward"}))
    cand = fp(mv("layer.wall_p50_us", 1500.0, caliber=terms.ELAPSED, tier=3, **{"pass": "forward"}))
    (w,) = _walls(compare_fingerprints(base, cand, pol_default)[0]).values()
    assert w.verdict == terms.REGRESSION


@pytest.fixture(scope="module")
def pol_default():
    return load_policy(None)


def _unique_fp(wall, classes):
    f = fp(mv("layer.wall_p50_us", wall, caliber=terms.ELAPSED, tier=3, **{"pass": "forward"}),
           mv("layer.class_count", 4.0, unit="layers", tier=1, **{"class": "unique", "pass": "forward"}))
    return dataclasses.replace(f, detail={"segments": [{"rank": 0, "classes": [
        {"level": "layer", "class_id": c, "pass": "forward"} for c in classes]}]})


def test_unique_layers_with_the_same_classes_are_compared(pol_default):
    """Two captures of one model (one profiler level each, say): the same non-recurring layers,
    the same boundaries; the median wall is compared."""
    (w,) = _walls(compare_fingerprints(_unique_fp(1000.0, "ABCD"), _unique_fp(1500.0, "DCBA"),
                                       pol_default)[0]).values()
    assert w.verdict == terms.REGRESSION


def test_unique_layers_with_other_classes_are_not_compared(pol_default):
    (w,) = _walls(compare_fingerprints(_unique_fp(1000.0, "ABCD"), _unique_fp(600.0, "ABXY"),
                                       pol_default)[0]).values()
    assert w.verdict == terms.INCOMPARABLE
    assert "2 of 4 baseline layer classes absent from the candidate, 2 new" in w.reason
