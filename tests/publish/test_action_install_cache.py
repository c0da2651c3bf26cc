"""The composite action's install is cached: the key follows the action's version and the Python,
a restored environment is used as it is (nothing installed), and actions/cache saves it right
after a fresh install. The cold install itself runs in test_installed_package.py
(test_composite_action_installs_itself); its times are in docs/install.md."""
import os
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def steps():
    return {st.get("id"): st for st in yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]}


def run_step(step_id, env, out):
    out.write_text("")
    r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", steps()[step_id]["run"]],
                       env={**env, "GITHUB_OUTPUT": str(out)}, capture_output=True, text=True, timeout=120)
    return r, dict(ln.split("=", 1) for ln in out.read_text().splitlines() if "=" in ln)


def action_copy(into: Path) -> Path:
    """The files the key hashes: pyproject.toml and perfgate/."""
    shutil.copy2(ROOT / "pyproject.toml", into / "pyproject.toml")
    shutil.copytree(ROOT / "perfgate", into / "perfgate", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def base_env(tmp_path, action):
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "RUNNER_TEMP": str(tmp_path / "temp"),
            "RUNNER_OS": "Linux", "RUNNER_ARCH": "X64", "GITHUB_ACTION_PATH": str(action), "PG_INSTALL": "true"}


def test_the_key_follows_the_action_s_version_and_the_python(tmp_path):
    action = action_copy(tmp_path)
    env = base_env(tmp_path, action)
    r, first = run_step("env", env, tmp_path / "o1")
    assert r.returncode == 0, r.stderr
    py = subprocess.run(["python3", "-c", "import platform; print(platform.python_version())"], capture_output=True,
                        text=True, check=True).stdout.strip()
    assert first["key"].startswith(f"perfgate-venv-Linux-X64-py{py}-") and first["venv"] == str(tmp_path / "temp"
                                                                                                / "perfgate-venv")
    assert run_step("env", env, tmp_path / "o2")[1]["key"] == first["key"]   # nothing changed: the same key
    (action / "perfgate" / "__pycache__").mkdir(exist_ok=True)
    (action / "perfgate" / "__pycache__" / "x.pyc").write_bytes(b"")   # bytecode is no version
    assert run_step("env", env, tmp_path / "o3")[1]["key"] == first["key"]
    (action / "perfgate" / "policies" / "default.yaml").write_text("# another release\n")
    assert run_step("env", env, tmp_path / "o4")[1]["key"] != first["key"]
    # another interpreter first on PATH (a copy of this Python: same version, another path)
    other = tmp_path / "other-python"
    subprocess.run(["python3", "-m", "venv", "--copies", "--without-pip", str(other)], check=True)
    r, moved = run_step("env", {**env, "PATH": f"{other / 'bin'}:{env['PATH']}"}, tmp_path / "o5")
    assert r.returncode == 0 and moved["key"] != run_step("env", env, tmp_path / "o6")[1]["key"]
    assert moved["key"].startswith(f"perfgate-venv-Linux-X64-py{py}-")


def test_install_false_computes_no_key(tmp_path):
    r, outs = run_step("env", {**base_env(tmp_path, ROOT), "PG_INSTALL": "false"}, tmp_path / "o")
    assert r.returncode == 0 and outs == {}
    a = steps()
    assert a["restore"]["if"] == "steps.env.outputs.key != ''"
    assert a["restore"]["uses"].startswith("actions/cache/restore@") and a["save"]["uses"].startswith(
        "actions/cache/save@")
    assert a["restore"]["with"] == a["save"]["with"] == {"path": "${{ steps.env.outputs.venv }}",
                                                         "key": "${{ steps.env.outputs.key }}"}
    assert "steps.install.outputs.save == 'true'" in a["save"]["if"]
    order = [st.get("id") for st in yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]]
    assert order == ["env", "restore", "install", "save", "gate"]   # install and check stay separate


def test_a_restored_environment_is_used_as_it_is(tmp_path):
    """The cache hit: the venv is in place with its key file; the step installs nothing, asks for
    no save, and names the venv's python for the check."""
    env = base_env(tmp_path, ROOT)
    r, outs = run_step("env", env, tmp_path / "o1")
    venv = Path(outs["venv"])
    # the restored environment: here a venv that sees this checkout's perfgate
    subprocess.run(["python3", "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    (venv / ".perfgate-key").write_text(outs["key"])
    env_i = {**env, "PG_KEY": outs["key"], "PG_VENV": str(venv), "PYTHONPATH": str(ROOT)}
    r, inst = run_step("install", env_i, tmp_path / "o2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restored; nothing to install" in r.stdout and inst == {"python": str(venv / "bin/python")}
    assert "save" not in inst


def test_a_restored_environment_of_another_key_is_not_trusted(tmp_path):
    """A key file from another version: the environment is rebuilt (here the rebuild cannot reach
    python3 -m venv, so the step says so and falls back), never used as it is."""
    env = base_env(tmp_path, ROOT)
    r, outs = run_step("env", env, tmp_path / "o1")
    venv = Path(outs["venv"])
    subprocess.run(["python3", "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    (venv / ".perfgate-key").write_text("perfgate-venv-Linux-X64-py3.0.0-old")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho \"python3 $*\" >> \"$CALLS\"\nexit 1\n")
    (fake / "python3").chmod(0o755)
    calls = tmp_path / "calls"
    env_i = {**env, "PG_KEY": outs["key"], "PG_VENV": str(venv), "PYTHONPATH": str(ROOT),
             "PATH": f"{fake}:{env['PATH']}", "CALLS": str(calls)}
    r, inst = run_step("install", env_i, tmp_path / "o2")
    assert "restored" not in r.stdout and not venv.exists()   # removed, not reused
    assert "python3 -m venv --without-pip" in calls.read_text()
    assert "--only-binary :all: --no-binary perfgate" in calls.read_text()   # wheels only, even in the fallback
    assert r.returncode != 0 and "python" not in inst
