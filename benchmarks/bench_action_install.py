#!/usr/bin/env python3
"""What the composite action's install costs a CI job: cold and warm, uv and pip.

The action's own steps ("Locate perfgate's environment" and "Install perfgate", read from
action.yml) run with bash as the runner runs them, against a copy of this checkout as
``$GITHUB_ACTION_PATH``; every figure is a wall time measured in this run:

* **uv, cold**: empty uv and pip caches, no environment under ``$RUNNER_TEMP``: the action's path
  (a venv without pip, uv installed into it, ``uv pip install`` of the action folder, wheels only).
* **pip, cold**: the same install with pip alone (``python3 -m venv`` with pip, ``pip install
  --only-binary :all: --no-binary perfgate``), empty pip cache: what the action did before.
* **warm**: the two steps again with the environment in place, as ``actions/cache/restore``
  leaves it when nothing changed: the step finds it and installs nothing.
* **restore**: the environment packed as actions/cache packs it (``tar`` + zstd), its size, and
  the time to unpack it (the cache service's download is not included: there is none here).

Packages come from PyPI only (``PIP_CONFIG_FILE=/dev/null``; uv reads no pip configuration), as
on a hosted runner. Runs are interleaved (uv, pip, uv, pip, ...) so load from other jobs hits
both tools.

Usage: python3 benchmarks/bench_action_install.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _steps():
    steps = {st.get("id"): st for st in yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]}
    return steps["env"]["run"], steps["install"]["run"]


def _source(into: Path) -> Path:
    """The checkout's tracked and new files, as the runner downloads the action."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (into / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, into / f)
    return into


def _bash(script: str, env: dict, out: Path) -> dict:
    out.write_text("")
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                   env={**env, "GITHUB_OUTPUT": str(out)}, check=True, timeout=1800)
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)


def _machine_env() -> dict:
    """This machine's environment (its PATH, its TLS trust: SSL_CERT_FILE, PIP_CERT) without what
    would steer an install elsewhere (PYTHONPATH, a virtualenv, pip or uv settings)."""
    return {k: v for k, v in os.environ.items()
            if k == "PIP_CERT" or not (k.startswith(("PYTHON", "PIP_", "UV_")) or k == "VIRTUAL_ENV")}


def action_install(work: Path, action: Path) -> tuple[float, Path]:
    """The action's two steps in a fresh $RUNNER_TEMP (or the one left by the previous call):
    wall time and the environment's folder."""
    env_step, install_step = _steps()
    env = {**_machine_env(), "HOME": str(work / "home"), "RUNNER_TEMP": str(work / "runner-temp"),
           "GITHUB_ACTION_PATH": str(action), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1",
           "UV_CACHE_DIR": str(work / "uv-cache"), "XDG_CACHE_HOME": str(work / "cache")}
    (work / "runner-temp").mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    outs = _bash(env_step, {**env, "PG_INSTALL": "true"}, work / "out-env")
    _bash(install_step, {**env, "PG_INSTALL": "true", "PG_KEY": outs["key"], "PG_VENV": outs["venv"]},
          work / "out-install")
    return time.perf_counter() - t, Path(outs["venv"])


def pip_install(work: Path, action: Path) -> float:
    """The same install with pip alone, as the action did before: venv with pip, pip install."""
    env = {**_machine_env(), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1", "HOME": str(work / "home")}
    venv = work / "pip-venv"
    t = time.perf_counter()
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, env=env)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--only-binary", ":all:",
                    "--no-binary", "perfgate", str(action)], check=True, env=env, timeout=1800)
    return time.perf_counter() - t


def restore_cost(venv: Path, work: Path) -> tuple[float, float]:
    """Size of the environment packed as actions/cache packs it (tar, zstd), MB, and seconds to unpack."""
    archive = work / "cache.tzst"
    subprocess.run(["tar", "--posix", "-I", "zstd -T0", "-cf", str(archive), "-C", str(venv.parent), venv.name],
                   check=True)
    dest = work / "unpacked"
    dest.mkdir()
    t = time.perf_counter()
    subprocess.run(["tar", "-I", "zstd -d", "-xf", str(archive), "-C", str(dest)], check=True)
    return archive.stat().st_size / 1e6, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times = {"uv, cold": [], "pip, cold": [], "warm": []}
    packed = None
    with tempfile.TemporaryDirectory(prefix="pg-install-") as tmp:
        action = _source(Path(tmp) / "action")
        for i in range(args.rounds):
            work = Path(tmp) / f"uv-{i}"
            cold, venv = action_install(work, action)
            times["uv, cold"].append(cold)
            times["warm"].append(action_install(work, action)[0])
            if packed is None and shutil.which("zstd"):
                packed = restore_cost(venv, work)
            shutil.rmtree(work)
            work = Path(tmp) / f"pip-{i}"
            times["pip, cold"].append(pip_install(work, action))
            shutil.rmtree(work)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    print("\n| install | wall time, s (each run) | median, s |\n|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {' / '.join(f'{x:.1f}' for x in v)} | {statistics.median(v):.1f} |")
    if packed:
        print(f"\nthe environment packed (tar + zstd): {packed[0]:.0f} MB, unpacked in {packed[1]:.1f} s")


if __name__ == "__main__":
    main()
