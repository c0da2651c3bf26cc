"""Errors are caught in one place: every command's PerfgateError reaches ``_Group.invoke``,
which prints ``perfgate: <kind>: <message>`` and exits with the error's own code; no command
catches PerfgateError itself (``perfgate report`` registers a hook that writes its error page first)."""
import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate import cli, errors
from perfgate.cli import main

# one class per exit code (2, 3, 4, 5) plus the base class (exit 2)
ERRORS = [errors.PolicyError, errors.InvalidCaptureError, errors.NoBaselineError, errors.StoreError,
          errors.PerfgateError]


class _Raises:
    def __init__(self, exc):
        self.exc = exc

    def __call__(self, *a, **kw):
        raise self.exc


def _commands(tmp_path, write: bool = True):
    """(name, argv, [(module, attribute)] patched to raise) for every command of the CLI; with
    ``write`` the capture folder and comment body they name are created in ``tmp_path`` (never
    at collection time, where ``tmp_path`` is only a placeholder: the repository's own folder)."""
    cap = tmp_path / "cap"
    body = tmp_path / "body.md"
    if write:
        cap.mkdir(exist_ok=True)
        body.write_text("<!-- perfgate:main -->\nbody\n")
    hs = [("perfgate.history.store", "HistoryStore")]
    return [
        ("baseline save", ["baseline", "save", "--name", "m", cap], [("perfgate.app.gate", "save_baseline")]),
        ("baseline list", ["baseline", "list"], [("perfgate.store.baselines.BaselineStore", "names")]),
        ("baseline show", ["baseline", "show", "m"], [("perfgate.store.baselines.BaselineStore", "load")]),
        ("check", ["check", "--baseline", "m", cap, "--out", tmp_path / "o"], [("perfgate.app.gate", "check_and_report")]),
        ("compare", ["compare", "--base", cap, cap, "--out", tmp_path / "o"], [("perfgate.app.gate", "compare_and_report")]),
        ("history record", ["history", "record", cap, "--branch", "b", "--db", tmp_path / "h.sqlite"],
         [("perfgate.app.gate", "record_history")]),
        ("history runs", ["history", "runs"], hs),
        ("history query", ["history", "query", "--metric", "step.time_us"], hs),
        ("history trend", ["history", "trend"], hs),
        ("history report", ["history", "report", "--out", tmp_path / "hr"], hs),
        ("history site", ["history", "site", tmp_path / "hsite"], hs),
        ("history journal", ["history", "journal", "--branch", "b"], hs),
        ("fingerprint", ["fingerprint", cap], [("perfgate.app.run", "fingerprint_path")]),
        ("synth", ["synth", tmp_path / "s"], [("perfgate.synth", "write_capture")]),
        ("demo", ["demo", "--out", tmp_path / "d"], [("perfgate.app.gate", "run_demo")]),
        ("report", ["report", cap, "--html", tmp_path / "r.html"], [("perfgate.app.gate", "capture_report")]),
        ("comment", ["comment", body], [("perfgate.publish.github", "post_comment_file")]),
        ("github-context", ["github-context"], [("perfgate.publish.github", "context_from_env")]),
        ("sweep", ["sweep", cap, "--out", tmp_path / "sw"], [("perfgate.app.sweep", "run_sweep")]),
        ("structure", ["structure", cap], [("perfgate.app.run", "structure_report")]),
        ("calibrate", ["calibrate", cap, cap, cap, "--out", tmp_path / "c.yaml"], [("perfgate.app.gate", "calibrate")]),
    ]


def _command_names(group, prefix=""):
    out = []
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out += _command_names(cmd, f"{prefix}{name} ")
        else:
            out.append(f"{prefix}{name}")
    return out


def test_the_table_covers_every_command(tmp_path):
    assert sorted(c[0] for c in _commands(tmp_path)) == sorted(_command_names(main))


@pytest.mark.parametrize("command", [c[0] for c in _commands(Path("."), write=False)])
def test_every_command_maps_each_error_to_its_exit_code(command, tmp_path, monkeypatch, policy):
    import importlib
    monkeypatch.setattr(cli, "_policy", lambda path: policy)  # loaded once: the error path is under test
    name, argv, targets = next(c for c in _commands(tmp_path) if c[0] == command)
    for cls in ERRORS:
        e = cls(f"boom from {name}", path="some/file.csv", row=7, hint="do this")
        with monkeypatch.context() as m:
            m.setenv("PERFGATE_HISTORY", str(tmp_path / "hist.sqlite"))
            for mod, attr in targets:
                owner, _, cls_name = mod.rpartition(".") if mod.endswith("BaselineStore") else (mod, "", "")
                obj = getattr(importlib.import_module(owner), cls_name) if cls_name else importlib.import_module(mod)
                m.setattr(obj, attr, _Raises(e))
            r = CliRunner().invoke(main, list(map(str, argv)), env={}, catch_exceptions=False)
        assert r.exit_code == cls.exit_code, (name, cls.__name__, r.output)
        kind = cls.kind.replace("_", " ")
        assert f"perfgate: {kind}: " in r.output and f"boom from {name}" in r.output, (name, r.output)
        assert "some/file.csv" in r.output and "row 7" in r.output and "do this" in r.output, r.output


def test_report_writes_its_error_page_through_the_one_handler(tmp_path, monkeypatch):
    e = errors.InvalidCaptureError("kernel_details.csv has no data rows", path="cap/kernel_details.csv")
    monkeypatch.setattr("perfgate.app.gate.capture_report", _Raises(e))
    page = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(tmp_path), "--html", str(page)], env={}, catch_exceptions=False)
    assert r.exit_code == errors.EXIT_INVALID_CAPTURE
    assert "INVALID_CAPTURE: the capture could not be read" in r.output and "no data rows" in r.output
    assert "no data rows" in page.read_text()
    # any other error: no page, the plain message and exit code
    page2 = tmp_path / "r2.html"
    monkeypatch.setattr("perfgate.app.gate.capture_report", _Raises(errors.StoreError("disk full")))
    r = CliRunner().invoke(main, ["report", str(tmp_path), "--html", str(page2)], env={}, catch_exceptions=False)
    assert r.exit_code == errors.EXIT_STORE and "store error: disk full" in r.output and not page2.exists()


def test_no_command_catches_perfgate_error_itself():
    """The only ``_fail`` call is in ``_Group.invoke``; the only other ``except PerfgateError`` is the
    error page of ``perfgate report`` failing to write (reported, then the original error stands)."""
    tree = ast.parse(Path(cli.__file__).read_text())
    where = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.ClassDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_fail":
                    where.setdefault("_fail", set()).add(fn.name)
                if isinstance(node, ast.ExceptHandler) and "PerfgateError" in ast.unparse(node.type or ast.Name("")):
                    where.setdefault("except", set()).add(fn.name)
    assert where["_fail"] == {"_Group", "invoke"}
    assert where["except"] == {"_Group", "invoke", "_report_read_error"}


def test_collecting_these_tests_writes_nothing_in_the_working_folder(tmp_path, monkeypatch):
    """Collection once wrote body.md and cap/ into the folder pytest ran in (the repository root)."""
    monkeypatch.chdir(tmp_path)
    _commands(Path("."), write=False)
    assert list(tmp_path.iterdir()) == []
