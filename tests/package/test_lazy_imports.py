"""A single-capture check imports only what it uses: scipy is for repeated-capture
statistics and calibration, matplotlib for HTML reports. Each costs ~1 s of import, which
would be most of a small pair's check."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import json, sys
from perfgate.synth.writer import SynthSpec, write_capture
base = write_capture(sys.argv[1] + "/base", SynthSpec(seed=1, ranks=1))
cand = write_capture(sys.argv[1] + "/cand", SynthSpec(seed=2, ranks=1))
before = set(sys.modules)
import perfgate.cli
from perfgate.cli import main
codes = []
for args in (["baseline", "save", "--name", "b", "--baseline-dir", sys.argv[1] + "/bl", str(base)],
             ["check", "--baseline", "b", "--baseline-dir", sys.argv[1] + "/bl", "--out", sys.argv[1] + "/out",
              "--quiet", str(cand)]):
    try:
        main(args)
    except SystemExit as e:
        codes.append(e.code)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"scipy", "matplotlib", "ruptures", "github3", "openpyxl"})
unused = sorted(set(sys.modules) & {"sqlite_utils", "perfgate.report.html"})
print(json.dumps({"codes": codes, "heavy": heavy, "unused": unused, "synth_loaded_scipy": "scipy" in before}))
"""


def test_single_capture_check_does_not_import_scipy_or_matplotlib(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["codes"][0] in (0, None) and out["codes"][1] in (0, 1), out  # a verdict was reached
    assert (tmp_path / "out" / "perfgate-result.json").is_file()
    assert not out["synth_loaded_scipy"]
    assert out["heavy"] == [], f"a single-capture check imported {out['heavy']}"
    # without --html and without a history database: no HTML renderer, no sqlite-utils (~70 ms)
    assert out["unused"] == [], f"a check without --html / history imported {out['unused']}"
