"""Every function in the package can be held in the head: at most 8 positional parameters and 12 in
all (``self``/``cls`` not counted), and at most 120 lines. Click commands are exempt from the
parameter limits: click passes every option as a parameter.

Parameters that travel together belong in a small frozen dataclass; a long function is split into
named steps that read top to bottom.
"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "perfgate"
MAX_POSITIONAL, MAX_PARAMETERS, MAX_LINES = 8, 12, 120


def _is_click_command(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = ast.unparse(target)
        if name.endswith((".command", ".group", ".option", ".argument", "pass_context")) or name.startswith("click."):
            return True
    return False


def _functions():
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f.relative_to(PKG.parent), node


def _counts(fn):
    a = fn.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    if positional[:1] in (["self"], ["cls"]):
        positional = positional[1:]
    return len(positional), len(positional) + len(a.kwonlyargs)


def test_no_function_takes_too_many_parameters():
    bad = []
    for where, fn in _functions():
        if _is_click_command(fn):
            continue
        positional, total = _counts(fn)
        if positional > MAX_POSITIONAL or total > MAX_PARAMETERS:
            bad.append(f"{where}:{fn.lineno} {fn.name}: {positional} positional, {total} in all")
    assert not bad, "\n".join(bad)


def test_no_function_runs_over_the_line_limit():
    bad = [f"{where}:{fn.lineno} {fn.name}: {fn.end_lineno - fn.lineno + 1} lines"
           for where, fn in _functions() if fn.end_lineno - fn.lineno + 1 > MAX_LINES]
    assert not bad, "\n".join(bad)
