"""The package's one layer map (whole-number layers; imports point down only).

    0  errors, terms, version, ci_env,     no perfgate imports beyond layer 0
       hostmem, jsonout
    1  model                               data model: Fingerprint, MetricValue, Comparison, ...
    2  policy/                             policy load, operator spec, segment knowledge, YAML
    3  ingest/                             files -> typed tables
    4  metrics/                            tables -> fingerprint
    5  synth/                              the synthetic capture writer (tests and benchmarks)
    6  compare/                            fingerprints + policy -> verdicts
    7  history/                            SQLite run history, change points
    8  store/                              baselines, atomic writes
    9  report/                             text, Markdown, JUnit, JSON, HTML renderers and writers
    10 app/                                the application: run (fingerprint paths: process pool, dask
                                           fan-out) < gate (save a baseline, check, record, calibrate),
                                           sweep (fixture sweeps)
    11 publish/                            GitHub publishing
    12 cli                                 the thin command line
    13 __init__, __main__                  lazy re-exports, ``python -m perfgate``

An import may name its own top-level unit or one on a lower layer; nothing else. The checks walk
every module's imports with ``ast`` (lazy imports inside functions included).
"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "perfgate"
LAYERS = {
    "errors": 0, "terms": 0, "version": 0, "ci_env": 0, "hostmem": 0, "jsonout": 0,
    "model": 1, "policy": 2, "ingest": 3, "metrics": 4, "synth": 5, "compare": 6, "history": 7,
    "store": 8, "report": 9, "app": 10, "publish": 11, "cli": 12,
    "__init__": 13, "__main__": 13,
}
# what may stand at the package's top level: the units above (modules or packages), nothing else
ALLOWED_TOP = set(LAYERS)


def _unit(module: str) -> str:
    """perfgate.compare.stats -> compare; perfgate -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports():
    """(importing unit, imported module, file) for every perfgate import in the package."""
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent).with_suffix("")
        me = "__init__" if rel.parts == ("perfgate", "__init__") else rel.parts[1]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "perfgate":
                if node.module == "perfgate":  # `from perfgate import terms` names the submodule
                    for a in node.names:
                        yield me, f"perfgate.{a.name}", f
                else:
                    yield me, node.module, f
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "perfgate":
                        yield me, a.name, f


def test_no_loose_module_beyond_the_map():
    top = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
           if (p.is_file() and p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())}
    assert top <= ALLOWED_TOP, sorted(top - ALLOWED_TOP)
    stray_dirs = [p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"
                  and not (p / "__init__.py").exists() and any(p.rglob("*.py"))]
    assert not stray_dirs, stray_dirs


def test_every_unit_has_a_layer():
    missing = {(_unit(mod), str(f)) for _, mod, f in _imports() if _unit(mod) not in LAYERS}
    assert not missing, missing


def test_imports_point_down_only():
    bad = []
    for me, mod, f in _imports():
        other = _unit(mod)
        if other == "__init__":
            bad.append(f"{f.relative_to(PKG.parent)} imports the package root ({mod}); import the submodule")
            continue
        if other != me and LAYERS[other] >= LAYERS[me]:
            bad.append(f"{f.relative_to(PKG.parent)} ({me}, layer {LAYERS[me]}) imports {mod} "
                       f"({other}, layer {LAYERS[other]})")
    assert not bad, "\n".join(bad)


def test_no_import_cycle_between_modules():
    """Module-level imports (not those deferred into functions) form no cycle."""
    graph: dict[str, set] = {}
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        deps = graph.setdefault(name, set())
        for node in ast.parse(f.read_text()).body:  # top-level statements only
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfgate"):
                if node.module == "perfgate":
                    deps.update(f"perfgate.{a.name}" for a in node.names)
                else:
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("perfgate"))
    seen, stack, cycles = set(), [], []

    def visit(n):
        if n in stack:
            cycles.append(stack[stack.index(n):] + [n])
            return
        if n in seen or n not in graph:
            return
        seen.add(n)
        stack.append(n)
        for d in sorted(graph[n]):
            visit(d)
        stack.pop()
    for n in sorted(graph):
        visit(n)
    # a package's __init__ importing its own submodules is not a cycle unless the submodule
    # imports the package back *and* something in between needs a name not yet defined
    real = [c for c in cycles if not all(x.startswith(c[0]) or c[0].startswith(x) for x in c)]
    assert not real, real


def test_only_cli_imports_click_and_prints():
    import re
    for f in PKG.rglob("*.py"):
        if f.name == "cli.py":
            continue
        text = f.read_text()
        assert "import click" not in text, f
        assert not re.search(r"(?<![\w.])print\(", text) and "sys.exit" not in text, f


APP_ORDER = {"run": 0, "gate": 1, "sweep": 1}  # within app/: gate and sweep drive run, never back


def test_the_application_folder_points_down_too():
    bad = []
    for me, mod, f in _imports():
        parts = mod.split(".")
        if me != "app" or parts[:2] != ["perfgate", "app"] or len(parts) < 3:
            continue
        mine, theirs = f.stem, parts[2]
        if mine in APP_ORDER and theirs != mine and APP_ORDER[theirs] >= APP_ORDER[mine]:
            bad.append(f"app/{mine} imports app/{theirs}")
    assert not bad, bad


def test_few_loose_modules_at_the_top():
    """Beyond the package's spine (cli, errors, terms, model, version), at most four modules stand
    loose at the top level; the rest live in the folder of their stage."""
    spine = {"cli", "errors", "terms", "model", "version", "__init__", "__main__"}
    loose = {p.stem for p in PKG.glob("*.py")} - spine
    assert len(loose) <= 4, sorted(loose)
