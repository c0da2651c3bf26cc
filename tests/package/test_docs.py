"""The documentation is complete and current: every registry metric documented with its unit,
caliber and source (docs/metrics.md generated from the registry and equal to the committed
file), every CLI command and option has help, README is a short front door whose test
command is exactly what .ci/run runs, and its links point at files that exist."""
import re
from pathlib import Path

import click
import pytest

from perfgate import terms
from perfgate.cli import main as cli_main
from perfgate.metrics import registry
from perfgate.report import docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
METRICS_MD = ROOT / "docs" / "metrics.md"


def test_metrics_reference_equals_the_generated_one():
    committed = METRICS_MD.read_text(encoding="utf-8")
    assert committed == docs.render_metrics_reference(), \
        f"docs/metrics.md is stale: regenerate it with `{docs.REGENERATE}`"


@pytest.mark.parametrize("name", sorted(registry.REGISTRY))
def test_every_metric_is_documented_with_unit_caliber_and_source(name):
    d = registry.REGISTRY[name]
    assert d.unit and d.description and d.source, name
    # a time caliber, or a note saying what the figure is measured on -- never both, never neither
    assert (d.caliber in terms.CALIBERS) != bool(d.caliber_note), name
    section = METRICS_MD.read_text(encoding="utf-8").split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    assert f"* unit: {d.unit}\n" in section
    assert f"* caliber: {docs.caliber_text(d)}\n" in section
    assert f"* source: {d.source}\n" in section
    assert f"* tier: {docs.TIER_TEXT[d.tier]}\n" in section


def test_a_time_metric_without_a_caliber_says_what_it_is_measured_on():
    # microseconds that are neither ΣDuration nor busy union are spans or gaps, never counts
    for d in registry.REGISTRY.values():
        if d.unit == "us" and d.caliber is None:
            assert d.caliber_note not in (None, registry._COUNT), d.name


def test_a_metric_without_caliber_or_note_cannot_be_rendered():
    bare = registry.MetricDef("x.bare", "us", None, terms.TIER_STEP, "a figure", "somewhere")
    with pytest.raises(ValueError, match="x.bare has no caliber and no caliber_note"):
        docs.caliber_text(bare)
    assert docs.caliber_text(registry.get("step.time_us")) == "elapsed"
    assert docs.caliber_text(registry.get("step.computing_us")) == "busy union"
    assert docs.caliber_text(registry.get("kernel.calls_per_step")) == "count (not a time figure)"


def test_metrics_reference_shows_the_policy_it_is_given(tmp_path):
    from perfgate.policy import load_policy
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\nmetrics:\n  step.time_us: {gated: false, direction: lower_is_better, "
                   "tolerance: {rel: 0.25}}\n")
    text = docs.render_metrics_reference(load_policy(pol))
    section = text.split("\n## step.time_us\n", 1)[1].split("\n## ", 1)[0]
    assert "* default policy: reported only, lower_is_better, ±25%\n" in section


def _commands(cmd, path):
    yield " ".join(path), cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _commands(sub, path + [name])


def test_every_command_and_option_has_help():
    seen, missing = [], []
    for path, cmd in _commands(cli_main, ["perfgate"]):
        seen.append(path)
        if not (cmd.help or "").strip():
            missing.append(path)
        missing += [f"{path} {p.opts[0]}" for p in cmd.params
                    if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert not missing, missing
    # the walk reached the subcommands of every group
    assert {"perfgate check", "perfgate baseline save", "perfgate history trend", "perfgate demo"} <= set(seen)


def test_readme_is_a_short_front_door():
    size = len(README.read_bytes())
    assert size <= 12 * 1024, f"README.md is {size} bytes; move reference material to docs/"


def _readme_test_command() -> str:
    cmds = re.findall(r"^\s+(?:.*?&& )?(python3 -m pytest[^\n]*)$", README.read_text(encoding="utf-8"), re.M)
    assert cmds, "README.md shows no `python3 -m pytest` command"
    return cmds[0].strip()


def test_readme_test_command_is_what_ci_runs():
    cmd = _readme_test_command()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"(^|&& ){re.escape(cmd)}\s*$", ci, re.M), (cmd, ci)


def test_readme_and_docs_links_point_at_files_that_exist():
    pages = [README] + sorted((ROOT / "docs").glob("*.md"))
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
    # the reference pages the README promises exist
    for name in ("metrics", "policy", "statistics", "github-actions", "history", "cases"):
        assert (ROOT / "docs" / f"{name}.md").exists(), name


@pytest.mark.parametrize("phrase", [r"this\s+round", r"previous\s+round", r"closing\s+note\s+of\s+issue", r"before\s+this\s+work"])
def test_docs_hold_no_development_log_prose(phrase):
    hits = [page.name for page in [README] + sorted((ROOT / "docs").glob("*.md"))
            if re.search(phrase, page.read_text(encoding="utf-8"), re.I)]
    assert not hits, f"{phrase!r} in {hits}"


# the tests say the behaviour they hold, not when or by whom it was found (patterns written with \s so
# that this file does not hold what it looks for)
_TEST_HISTORY = [r"audit\s+round", r"fresh[\s-]user", r"closing\s+note", r"issue\s+\d{2}", r"\bround\s\d\b"]


def test_tests_hold_no_development_history():
    hits = [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for path in sorted((ROOT / "tests").rglob("*.py"))
            for m in [re.search("|".join(_TEST_HISTORY), path.read_text(encoding="utf-8"), re.I)] if m]
    assert not hits, hits
    names = [path.name for path in (ROOT / "tests").rglob("*.py") if re.search(r"round\d|audit|fresh_user", path.name)]
    assert not names, names


def test_every_test_named_in_the_cases_page_exists():
    import ast
    named = re.findall(r"`(test_\w+)::(test_\w+)`", (ROOT / "docs" / "cases.md").read_text(encoding="utf-8"))
    assert len(named) >= 26
    missing = []
    for module, func in named:
        paths = sorted((ROOT / "tests").rglob(f"{module}.py"))
        names = {n.name for path in paths for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.FunctionDef)}
        if func not in names:
            missing.append(f"{module}::{func}")
    assert not missing, missing


def _selected(expr: str, marks: set) -> bool:
    from _pytest.mark.expression import Expression
    return Expression.compile(expr).evaluate(lambda name, **kw: name in marks)


def test_ci_runs_the_default_suite_and_the_slow_tests_apart():
    """README's test command (what .ci/run runs) is the default suite: it selects the plain and real
    tests and no benchmark, and its -m does not name ``slow`` so conftest leaves those out, as a plain
    ``python3 -m pytest`` does. GitHub CI runs the slow tests in a job of their own."""
    import shlex
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    from types import SimpleNamespace

    import conftest
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("slow:") for m in ini["markers"])
    addopts = shlex.split(ini["addopts"])
    runs = [shlex.split(part) for part in _readme_test_command().split("&&") if "pytest" in part]
    ci = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    runs += [shlex.split(line.split("&&")[-1]) for line in ci.splitlines() if "pytest -m slow" in line]
    exprs = [args[len(args) - 1 - args[::-1].index("-m") + 1] for args in runs]   # a later -m replaces addopts'
    default, slow = exprs
    assert default == addopts[addopts.index("-m") + 1]
    assert _selected(default, {"real"}) and _selected(default, set()) and not _selected(default, {"bench"})
    assert _selected(slow, {"slow"}) and not _selected(slow, {"bench"})

    def kept(expr):
        items = [SimpleNamespace(name=name, get_closest_marker=lambda m, name=name: m if m == name else None)
                 for name in ("slow", "plain")]
        config = SimpleNamespace(getoption=lambda opt: expr, hook=SimpleNamespace(pytest_deselected=lambda items: None))
        conftest.pytest_collection_modifyitems(config, items)
        return [item.name for item in items]
    assert kept(default) == ["plain"] and kept(slow) == ["slow", "plain"] and kept("") == ["plain"]
