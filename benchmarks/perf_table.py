#!/usr/bin/env python3
"""README's performance table, generated from the benchmark's results file.

``benchmarks/bench_scale.py`` (a run without ``--quick``) merges every figure it measured into
``benchmarks/results/last_full.json``: one entry per figure, each with its own ``taken``
(UTC date and time, the commit it measured with ``+dirty`` when the work tree differed from it,
the 1-minute load average when it started), so a partial run replaces only what it measured.
:func:`render` turns the file into the Markdown table README.md holds between ``BEGIN`` and
``END``; :func:`write_readme` rewrites that part (``python3 benchmarks/perf_table.py``, or
``bench_scale.py --write-readme``). tests/package/test_perf_table.py checks that README's table
is what :func:`render` makes of the committed file.

Figures (keys of ``figures``):
  fingerprint  one rank, ``--trace never``, in process, against the pyarrow string read of the
               same columns (the floor); ``shapes``: wall ratio per shape; the worst is quoted
  ref          ``perfgate check`` against ``msprof-analyze compare`` on a pair with traces:
               median wall of un-sampled runs; memory as stated in ``memory``
  pair         ``perfgate check``, real level1 baseline against level2 candidate, fresh
               processes, median wall
  ranks        synthetic ranks (perfgate.synth.scale), serial: ms CPU per rank at each count
  real_ranks   ranks made of the real level1 rank (kernel rows, trace_view.json,
               communication.json), each its own rank id and times: ms CPU per rank
  trace        trace_view.json scan, MiB/s CPU, real-shaped and nearly every event kept
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "last_full.json"
README = ROOT / "README.md"
BEGIN = "<!-- perf-table: benchmarks/perf_table.py -->"
END = "<!-- /perf-table -->"

#: the goals each row is held to (docs/performance.md)
GOALS = {"fingerprint": 3.0, "speed": 30.0, "lean": 5.0, "pair_s": 1.0, "rank_ms": 50.0, "trace_mibs": 200.0}


def load(path: Path = RESULTS) -> dict:
    """The results file as a dict (``{"figures": {}}`` when it does not exist)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {"figures": {}}


def merge(measured: dict, path: Path = RESULTS) -> dict:
    """Replace in ``path`` the figures of ``measured`` (each already carrying its ``taken``),
    keep the others; returns the merged document."""
    doc = load(path)
    doc.setdefault("figures", {}).update(measured)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def _taken(f: dict) -> str:
    t = f.get("taken", {})
    load_avg = t.get("load")
    return (f"{t.get('date', '?')[:10]}, {t.get('commit') or 'commit ?'}"
            + ("" if load_avg is None else f", load {load_avg:.1f}"))


#: where docs/performance.md says why a goal is not met
WHY_NOT_MET = "docs/performance.md#goals-not-met"


def _goal(goal: str, ok: bool) -> str:
    return goal if ok else f"{goal}: [not met]({WHY_NOT_MET})"


def _rows(figs: dict) -> list[tuple[str, str, str, dict]]:
    """(measurement, figure, goal, entry) per figure present, in README's order."""
    out = []
    f = figs.get("fingerprint")
    if f:
        worst = max(f["shapes"], key=f["shapes"].get)
        out.append((f"fingerprint, {f['rows'] / 1e6:g}M rows, worst shape ({worst})",
                    f"{f['perfgate_wall']:.2f} s, pyarrow read {f['floor_wall']:.2f} s: "
                    f"**{f['shapes'][worst]:.2f}×** ({f['ratio_cpu']:.1f}× CPU)",
                    _goal("≤ 3×", f["shapes"][worst] <= GOALS["fingerprint"]), f))
    f = figs.get("ref")
    if f:
        out.append((f"`check` vs msprof-analyze `compare`, {f['rows'] / 1e6:g}M-row pair",
                    f"{f['pg_wall']:.2f} s, {f['pg_mib']:,.0f} MiB vs {f['ms_wall']:.1f} s, {f['ms_mib']:,.0f} MiB: "
                    f"**{f['speed']:.1f}× faster, {f['lean']:.1f}× leaner**",
                    _goal("≥ 30×, ≥ 5×", f["speed"] >= GOALS["speed"] and f["lean"] >= GOALS["lean"]), f))
    f = figs.get("pair")
    if f:
        out.append((f"`check`, small real pair ({f['ranks']} ranks × {f['rows']} rows), median of {f['runs']}",
                    f"**{f['wall']:.2f} s**", _goal("< 1 s", f["wall"] < GOALS["pair_s"]), f))
    f = figs.get("ranks")
    if f:
        out.append((f"per rank, {' / '.join(f'{n:,}' for n in f['counts'])} synthetic ranks × {f['rank_rows']:,} rows",
                    "**" + " / ".join(f"{v:.1f}" for v in f["cpu_ms"]) + " ms** CPU",
                    _goal("≤ 50 ms", max(f["cpu_ms"]) <= GOALS["rank_ms"]), f))
    f = figs.get("real_ranks")
    if f:
        out.append((f"per rank, {f['ranks']} real level1 ranks ({f['rank_rows']} rows + trace)",
                    f"**{f['cpu_ms']:.1f} ms** CPU", _goal("≤ 50 ms", f["cpu_ms"] <= GOALS["rank_ms"]), f))
    f = figs.get("trace")
    if f:
        out.append(("trace scan, real-shaped / most events kept",
                    f"**{f['real_mibs']:.0f} / {f['most_mibs']:.0f} MiB/s** CPU",
                    _goal("≥ 200 MiB/s", min(f["real_mibs"], f["most_mibs"]) >= GOALS["trace_mibs"]), f))
    return out


def render(doc: dict) -> str:
    """The Markdown table (no markers) for the results document ``doc``: one row per figure,
    with the goal (marked when not met) and when, at which commit and load it was taken."""
    lines = ["| measurement | figure | goal | taken |", "|---|---|---|---|"]
    for what, figure, goal, f in _rows(doc.get("figures", {})):
        lines.append(f"| {what} | {figure} | {goal} | {_taken(f)} |")
    return "\n".join(lines)


def readme_with_table(text: str, doc: dict) -> str:
    """``text`` (README.md) with the part between BEGIN and END replaced by :func:`render`.
    Raises ValueError when the markers are missing."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"README.md has no {BEGIN!r} ... {END!r} markers")
    return text[:i + len(BEGIN)] + "\n" + render(doc) + "\n" + text[j:]


def write_readme(results: Path = RESULTS, readme: Path = README) -> None:
    readme.write_text(readme_with_table(readme.read_text(), load(results)))


if __name__ == "__main__":
    write_readme(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS)
