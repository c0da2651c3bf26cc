"""README's performance table is generated: it equals what benchmarks/perf_table.py makes of the
committed results file (benchmarks/results/last_full.json), every row saying when, at which
commit and at what load it was taken; a run merges only the figures it measured."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _perf_table():
    spec = importlib.util.spec_from_file_location("perf_table", ROOT / "benchmarks" / "perf_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_table_is_the_one_generated_from_the_committed_results():
    pt = _perf_table()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert pt.BEGIN in readme and pt.END in readme
    assert readme == pt.readme_with_table(readme, pt.load(pt.RESULTS)), \
        "README's performance table is stale: python3 benchmarks/bench_scale.py --write-readme"


def test_every_row_says_date_commit_and_goal():
    pt = _perf_table()
    doc = pt.load(pt.RESULTS)
    rows = pt.render(doc).splitlines()[2:]
    assert len(rows) == len(doc["figures"]) >= 6
    for row, f in zip(rows, [f for _, _, _, f in pt._rows(doc["figures"])]):
        assert f["taken"]["date"][:10] in row
        assert (f["taken"]["commit"] or "commit ?") in row
        if f["taken"].get("load") is not None:
            assert f"load {f['taken']['load']:.1f}" in row


def test_goal_not_met_is_marked():
    pt = _perf_table()
    doc = {"figures": {"pair": {"wall": 1.3, "runs": 5, "rows": 191, "ranks": 2,
                                "taken": {"date": "2026-01-02 03:04 UTC", "commit": "abc1234", "load": 0.25}}}}
    assert "< 1 s: [not met](docs/performance.md#goals-not-met)" in pt.render(doc)
    assert "2026-01-02, abc1234, load 0.2" in pt.render(doc)
    doc["figures"]["pair"]["wall"] = 0.8
    assert "| < 1 s |" in pt.render(doc)


def test_the_link_for_a_goal_not_met_leads_to_a_section_of_docs_performance():
    pt = _perf_table()
    page, anchor = pt.WHY_NOT_MET.split("#")
    headings = [line.lstrip("#").strip().lower().replace(" ", "-")
                for line in (ROOT / page).read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert anchor in headings


def test_a_partial_run_replaces_only_its_figures(tmp_path):
    pt = _perf_table()
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"figures": {"trace": {"real_mibs": 1, "most_mibs": 2, "taken": {}}}}))
    pt.merge({"pair": {"wall": 0.9, "runs": 5, "rows": 191, "ranks": 2, "taken": {}}}, path)
    assert set(pt.load(path)["figures"]) == {"trace", "pair"}


def test_readme_without_markers_is_refused():
    pt = _perf_table()
    with pytest.raises(ValueError, match="markers"):
        pt.readme_with_table("# no table\n", {"figures": {}})
