"""The lowest versions pyproject.toml admits must run perfgate: pip keeps an installed package
that satisfies the floor (a torch_npu environment with numpy 1.26 satisfied ``numpy>=1.24``), so
a floor below an API perfgate calls crashes every gate there (an install of the
old floors gave exit 70 on any capture with a timeline, history writes reported failed yet kept).
Each floor here names the API that sets it; raising the use of a newer API means raising it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+; the floors are checked on the newer leg")

ROOT = Path(__file__).resolve().parents[2]

#: package -> (lowest version that works, why)
FLOORS = {
    "numpy": ((2, 0), "np.bitwise_count (perfgate/ingest/tracebytes.py) is new in numpy 2.0"),
    "pyarrow": ((16,), "dictionary_encode of a dictionary column (ingest/kernels.py _categorical) fails "
                       "on pyarrow 14 ('no kernel matching input types'); 16.1 is the oldest seen working"),
    "pandas": ((2, 2, 2), "the oldest pandas seen running the whole demo and history with numpy 2"),
    "msgspec": ((0, 14), "msgspec.field(name=...) (the Structs of ingest/comm.py: JSON keys such as "
                         "'Elapse Time(ms)') is new in 0.14; 0.13.1 fails at import"),
    "sqlite-utils": ((4, 0), "sqlite-utils 3.x commits inside perfgate's explicit transaction "
                             "(history/store.py): 'cannot commit - no transaction is active', and a "
                             "write reported failed is kept"),
}


def _floors() -> dict:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for d in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9.]+)", d.strip())
        if m:
            out[m.group(1).lower()] = tuple(int(x) for x in m.group(2).split("."))
    return out


@pytest.mark.parametrize("package", FLOORS)
def test_floor_is_at_least_the_version_perfgate_needs(package):
    floors = _floors()
    need, why = FLOORS[package]
    assert package in floors, f"{package} has no >= floor in pyproject.toml"
    assert floors[package] >= need, f"{package}>={'.'.join(map(str, floors[package]))}: {why}"


def test_the_installed_versions_meet_the_floors():
    from importlib.metadata import version
    for package, floor in _floors().items():
        got = tuple(int(x) for x in re.findall(r"\d+", version(package))[:len(floor)])
        assert got >= floor, (package, version(package))
