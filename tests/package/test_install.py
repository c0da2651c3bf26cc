"""perfgate as an installed package: a wheel carries the built-in policies as package
data and works from an empty folder; the composite action installs itself (`install: true`);
optional parts (extras) fail with exit 2 naming the extra; `--version`; `.ci/run` honours
PERFGATE_SHARED.

The virtualenvs use --system-site-packages so pandas / pyarrow / ... are not downloaded again;
perfgate itself comes only from the wheel (each test asserts where it was imported from, and
runs with no PYTHONPATH from a folder outside the repository)."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.version import __version__

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILES = ("default.yaml", "segments.yaml", "mfu/matmul.yaml", "mfu/peaks.yaml")


def _clean_env(venv: Path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GITHUB_", "PERFGATE_", "PIP_"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv), **extra)
    return env


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The repository's files (tracked and new, not ignored) copied out, so builds never touch
    the checkout."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    dst = tmp_path_factory.mktemp("src") / "perfgate-src"
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = dist.glob("perfgate-*.whl")
    return whl


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(path)], check=True, timeout=300)
    return path


@pytest.mark.slow
def test_wheel_carries_the_policies_and_runs_from_an_empty_folder(wheel, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()
    for f in POLICY_FILES:
        assert f"perfgate/policies/{f}" in names, f  # one copy, inside the package
    assert not any(n.startswith("policies/") for n in names)
    venv = _venv(tmp_path / "venv")
    # --system-site-packages reaches the base interpreter's packages only: run inside a virtualenv
    # (README's), sys.executable's own pandas / pyarrow / ... are in that virtualenv's site-packages.
    # A .pth names the running interpreter's site folders, after the new venv's own (plain folders
    # on sys.path: their .pth files, e.g. an editable perfgate, are not processed)
    import site
    inner_site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (inner_site / "outer-site-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    r = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=600, env=_clean_env(venv))  # a PYTHONPATH
    # naming a checkout would make pip take that checkout's metadata for the installed package
    assert r.returncode == 0, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    env = _clean_env(venv)

    def pg(*args):
        return subprocess.run([str(venv / "bin/perfgate"), *args], cwd=empty, env=env, capture_output=True,
                              text=True, timeout=600)
    where = subprocess.run([str(venv / "bin/python"), "-c", "import perfgate, perfgate.policy as p; "
                            "print(perfgate.__file__); print(p.DEFAULT_POLICY)"], cwd=empty, env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert where == [str(site / "perfgate/__init__.py"), str(site / "perfgate/policies/default.yaml")]
    r = pg("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"perfgate, version {__version__}"
    r = pg("demo")
    assert r.returncode == 1 and "REGRESSION" in r.stdout, r.stdout + r.stderr
    caps = empty / "perfgate-demo" / "captures"
    r = pg("baseline", "save", "--name", "main", str(caps / "baseline"))
    assert r.returncode == 0 and (empty / "baselines" / "main.json").is_file(), r.stdout + r.stderr
    r = pg("check", "--baseline", "main", str(caps / "baseline"))
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    r = pg("check", "--baseline", "main", str(caps / "candidate"))
    assert r.returncode == 1 and "REGRESSION" in r.stdout, r.stdout + r.stderr
    result = json.loads((empty / "perfgate-out" / "perfgate-result.json").read_text())
    assert result["verdict"] == "REGRESSION" and result["counts"]["gated_regressions"] >= 1


@pytest.mark.slow
def test_composite_action_installs_itself(source, tmp_path):
    """action.yml with its default `install: true`: `pip install "$GITHUB_ACTION_PATH"` into a
    virtual environment of the action's own under $RUNNER_TEMP (a runner's system Python may refuse
    pip: PEP 668), then the gate runs from that installation (no PYTHONPATH, a workspace outside the
    repo); the job's own Python is left as it was."""
    from github_fake import FakeGitHub
    from test_action import REPO, PR, TOKEN, load_action, run_action
    from perfgate.synth import write_demo_pair
    assert load_action()["inputs"]["install"]["default"] == "true"
    venv = _venv(tmp_path / "venv")
    ws = tmp_path / "workspace"
    ws.mkdir()
    base, cand = write_demo_pair(ws / "captures")
    srv = FakeGitHub(tokens={TOKEN: "write"}).start()
    try:
        srv.add_pr(REPO, PR)
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": PR, "head": {"sha": "c" * 40, "repo": {
            "full_name": REPO}}, "base": {"sha": "d" * 40, "repo": {"full_name": REPO}}}}))
        runner_temp = tmp_path / "runner-temp"
        runner_temp.mkdir()
        env = _clean_env(venv, GITHUB_ACTIONS="true", GITHUB_JOB="gate", HOME=os.environ.get("HOME", "/tmp"),
                         RUNNER_TEMP=str(runner_temp))
        # before the action runs, the venv holds no perfgate of its own (the machine's editable
        # install of this checkout may still be visible through --system-site-packages)
        before = subprocess.run([str(venv / "bin/python"), "-c", "import perfgate; print(perfgate.__file__)"], cwd=ws,
                                env=env, capture_output=True, text=True).stdout.strip()
        assert not before.startswith(str(venv)), before
        r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(base), "--baseline-dir",
                                      str(ws / "baselines")], env={"GITHUB_EVENT_NAME": "push"})
        assert r.exit_code == 0, r.output
        env.update(GITHUB_EVENT_NAME="pull_request", GITHUB_EVENT_PATH=str(event), GITHUB_REPOSITORY=REPO,
                   GITHUB_API_URL=srv.api_url, GITHUB_TOKEN=TOKEN, GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"))
        code, outs, log = run_action({"capture": str(cand)}, env, ws, action_path=source)
        assert code == 1 and outs["verdict"] == "REGRESSION", log
        assert "comment created" in log and len(srv.comments[(REPO, PR)]) == 1
        own = runner_temp / "perfgate-venv"
        assert outs.get("verdict") and (own / "bin/python").is_file(), log
        installed = subprocess.run([str(own / "bin/python"), "-c", "import perfgate; print(perfgate.__file__)"],
                                   cwd=ws, env=env, capture_output=True, text=True, check=True).stdout.strip()
        assert installed.startswith(str(own)) and Path(installed).with_name("policies").joinpath(
            "default.yaml").is_file(), installed
        after = subprocess.run([str(venv / "bin/python"), "-c", "import perfgate; print(perfgate.__file__)"], cwd=ws,
                               env=env, capture_output=True, text=True).stdout.strip()
        assert after == before, (before, after)   # the job's Python got nothing
    finally:
        srv.stop()


def test_version():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"perfgate, version {__version__}"


def test_a_missing_extra_is_exit_2_naming_it(tmp_path, monkeypatch):
    """Optional parts (pyproject extras html / dask): refused before any work, nothing written; the
    xlsx extra only adds sweep.xlsx to a sweep that writes sweep.csv without it."""
    from perfgate.synth import write_demo_pair
    base, cand = write_demo_pair(tmp_path / "caps")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "openpyxl", None)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cand), "--baseline-dir", str(tmp_path / "bl"),
                                  "--out", str(out), "--html", str(tmp_path / "r.html")], env={"GITHUB_OUTPUT": None})
    assert r.exit_code == 2 and "pip install matplotlib (the 'html' extra: pip install '.[html]' from a clone)" in r.output and "--html needs matplotlib" in r.output
    assert not out.exists() and not (tmp_path / "r.html").exists()
    r = CliRunner().invoke(main, ["report", str(base), "--html", str(tmp_path / "c.html")])
    assert r.exit_code == 2 and "pip install matplotlib (the 'html' extra: pip install '.[html]' from a clone)" in r.output and not (tmp_path / "c.html").exists()
    # sweep: the rollup is not the extra, the spreadsheet is: sweep.csv written, a warning for the xlsx
    # (a base install refused the whole sweep)
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "caps"), "--out", str(tmp_path / "sw"), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "sweep.xlsx not written" in r.output and "pip install openpyxl: the 'xlsx' extra" in r.output
    assert (tmp_path / "sw" / "sweep.csv").is_file() and not (tmp_path / "sw" / "sweep.xlsx").exists()


def test_ci_run_honours_perfgate_shared(tmp_path):
    nowhere = tmp_path / "elsewhere"
    r = subprocess.run(["bash", str(ROOT / ".ci/run")], env={**os.environ, "PERFGATE_SHARED": str(nowhere)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"{nowhere}/fixtures/ascend is missing" in r.stderr, r.stderr


def test_a_policy_names_builtin_files_with_the_perfgate_prefix(tmp_path):
    from perfgate.errors import PolicyError
    from perfgate.policy import DEFAULT_POLICY, load_policy
    text = DEFAULT_POLICY.read_text()
    p = tmp_path / "mine.yaml"
    p.write_text(text + "\nmfu: {spec: 'perfgate:mfu/matmul.yaml', peaks: 'perfgate:mfu/peaks.yaml', chip: Ascend910}"
                        "\nsegments: 'perfgate:segments.yaml'\n")
    pol = load_policy(p)
    assert Path(pol.mfu.peaks_path) == DEFAULT_POLICY.parent / "mfu" / "peaks.yaml" and pol.mfu.peaks
    assert pol.segments is not None
    p.write_text(text + "\nmfu: {spec: 'perfgate:mfu/nope.yaml', peaks: 'perfgate:mfu/peaks.yaml', chip: Ascend910}\n")
    with pytest.raises(PolicyError) as e:
        load_policy(p)
    assert "mfu/nope.yaml" in str(e.value) and "mine.yaml" in e.value.render()
