"""The gated-metrics line (terminal, Markdown, HTML) adds up to its total: a gated metric absent
from the baseline is counted as new (not judged) instead of vanishing from the line (it read
"340 — 0 failing, 0 improved, 339 unchanged, 0 incomparable, 0 missing")."""
from __future__ import annotations

import json
import re

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture


def _parts(line: str) -> tuple[int, int]:
    total = int(re.search(r"ated metrics: (\d+) —", line).group(1))
    rest = line.split("—", 1)[1].split(";")[0].split(". Informational")[0]
    return total, sum(int(x) for x in re.findall(r"(\d+) [a-z]", rest))


def test_a_gated_metric_absent_from_the_baseline_is_counted_new(tmp_path):
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    bl = tmp_path / "bl"
    r = CliRunner()
    assert r.invoke(main, ["baseline", "save", "--name", "full", str(cap), "--baseline-dir", str(bl)]).exit_code == 0
    doc = json.loads((bl / "full.json").read_text())
    doc["fingerprint"]["metrics"].pop("step.time_us{view=p50}")
    (bl / "cut.json").write_text(json.dumps(doc))
    res = r.invoke(main, ["check", "--baseline", "cut", str(cap), "--baseline-dir", str(bl), "--out",
                          str(tmp_path / "o")], env={})
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if "gated metrics:" in ln)
    assert "1 new (absent from the baseline: not judged)" in line
    total, parts = _parts(line)
    assert total == parts, line
    md = next(ln for ln in (tmp_path / "o" / "perfgate-report.md").read_text().splitlines() if "Gated metrics:" in ln)
    assert "1 new" in md and _parts(md)[0] == _parts(md)[1], md
    full = r.invoke(main, ["check", "--baseline", "full", str(cap), "--baseline-dir", str(bl), "--out",
                           str(tmp_path / "o2")], env={})
    line = next(ln for ln in full.output.splitlines() if "gated metrics:" in ln)
    assert " new" not in line and _parts(line)[0] == _parts(line)[1], line
