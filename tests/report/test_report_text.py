"""Report text: kernel names render as written in Markdown, --json - stays one document under GitHub
Actions, check -v prints every line in full, and report on an invalid capture says why first."""
from __future__ import annotations

import csv
import json
import shutil

import pytest

from _cli import run


def test_json_on_stdout_stays_one_document_in_github_actions(synth_cap, tmp_path):
    """``check --json -`` under GitHub Actions (which always sets GITHUB_STEP_SUMMARY): the line
    "job summary: appended to ..." followed the JSON on stdout ("Extra data" for any reader)."""
    import subprocess
    import sys
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    env = {"PATH": "/usr/bin:/bin", "GITHUB_EVENT_NAME": "push", "GITHUB_STEP_SUMMARY": str(tmp_path / "sum.md"),
           "GITHUB_OUTPUT": str(tmp_path / "out.txt")}
    r = subprocess.run([sys.executable, "-m", "perfgate", "check", "--baseline", "b", "--baseline-dir", str(bl),
                        "--out", str(tmp_path / "o"), "--json", "-", str(synth_cap)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "PASS"
    assert "job summary: appended to" in r.stderr and (tmp_path / "sum.md").read_text()


NAMES = ["aclnnSwi<Glu>&amp;_x|y`z`_SwiGlu", "**b** [x](http://e) ~~s~~ \\ `", "`lead", "plain_name_Add"]


@pytest.mark.parametrize("name", NAMES)
def test_names_render_as_written_in_the_markdown(name):
    """Kernel names with Markdown / HTML characters: in code spans ``&lt;`` showed literally (no
    entity is decoded in a code span), ``\\|`` kept its backslash outside tables, a backtick became
    a different character, and ``**b**`` rendered bold in plain text. Rendered with markdown-it
    (CommonMark + GFM tables), every form shows the name exactly."""
    import re as _re

    from markdown_it import MarkdownIt

    from perfgate.report.mdtext import cell, code
    md = MarkdownIt("commonmark").enable("table")

    def text_of(html):
        import html as h
        return h.unescape(_re.sub(r"<[^>]+>", "", html)).strip()
    table = md.render(f"| a | b |\n|---|---|\n| {code(name, table=True)} | {cell(name)} |\n")
    cells = _re.findall(r"<td>(.*?)</td>", table, _re.S)
    assert [text_of(c) for c in cells] == [name, name], cells
    item = md.render(f"- {code(name)}: {cell(name)}\n")
    assert text_of(item) == f"{name}: {name}", item
    assert "<strong>" not in item and "<a " not in item and "<b>" not in table


def test_verbose_prints_every_line_in_full(tmp_path):
    """`check -v` promised everything "in full" but still cut the cause lines and the unsure line
    at 160 characters (the part saying how many runs are needed was lost)."""
    from perfgate.synth import write_demo_pair
    base, cand = write_demo_pair(tmp_path / "caps")
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "main", "--baseline-dir", bl, base).exit_code == 0
    short = run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o1", cand)
    full = run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o2", "-v", cand)
    assert short.exit_code == full.exit_code == 1
    assert any(line.endswith("…") for line in short.output.splitlines())
    assert not any(line.endswith("…") for line in full.output.splitlines()), full.output
    assert max(map(len, full.output.splitlines())) > 160


@pytest.mark.real
def test_report_on_an_invalid_capture_says_why_first(ascend, tmp_path):
    """`perfgate report` printed "INVALID_CAPTURE: 675 metrics, ranks [0, 1]": no reason, and a
    metric count that reads as a usable capture. It now names the failed self-check as check does."""
    cap = tmp_path / "slow"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    p = cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
    ni, di = rows[0].index("Name"), rows[0].index("Duration(us)")
    for r in rows[1:]:
        if "FlashAttentionScore_" in r[ni] and "Grad" not in r[ni]:
            r[di] = f"{float(r[di]) * 1.3:.3f}"
    with p.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    r = run("report", "--html", tmp_path / "r.html", cap)
    assert r.exit_code == 3, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("perfgate: INVALID_CAPTURE: self-check compute_union failed on rank 0 step 13:"), first
    assert " metrics, ranks" not in r.output and (tmp_path / "r.html").is_file()
