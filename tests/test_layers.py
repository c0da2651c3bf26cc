"""Imports point one way: errors/terms <- model/policy <- ingest <- metrics <- stats/attribution <- compare
<- report/store/synth <- gate, publish <- cli. Walks every module's imports with ast."""
import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "perfgate"
LEVEL = {"errors": 0, "terms": 0, "yamlfile": 0.25, "knowledge": 0.5, "opspec": 0.5, "model": 1, "policy": 1, "ingest": 2, "metrics": 3, "compare": 4, "opcompare": 4, "trend": 4, "stats": 3.5, "attribution": 3.5, "calibrate": 3.75,
         "report": 5, "store": 5, "synth": 5, "gate": 6, "publish": 6, "htmlreport": 6, "sweep": 6.5, "structure": 6.5, "cli": 7, "__init__": 8, "__main__": 8}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_point_one_way():
    bad = []
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG.parent).with_suffix("")
        mod = ".".join(rel.parts)
        me = layer(mod) if rel.name != "__init__" or len(rel.parts) > 2 else "__init__"
        if me == "__init__":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfgate"):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("perfgate")]
            for n in names:
                other = layer(n)
                if other == "__init__":
                    continue  # the package root only re-exports version and errors
                if LEVEL[other] > LEVEL[me] or (LEVEL[other] == LEVEL[me] and other != me):
                    bad.append(f"{mod} imports {n}")
    assert not bad, bad


def test_only_cli_imports_click_and_prints():
    for f in PKG.rglob("*.py"):
        if f.name == "cli.py":
            continue
        text = f.read_text()
        assert "import click" not in text, f
        assert not re.search(r"(?<![\w.])print\(", text) and "sys.exit" not in text, f
