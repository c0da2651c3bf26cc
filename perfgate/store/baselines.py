"""Baseline store: one human-diffable JSON file per baseline name.

File ``<dir>/<name>.json``::

    {"perfgate_baseline": 1, "name": "main", "saved_at": "...", "fingerprint": {...}}

The fingerprint holds its provenance (source path, ranks, steps, profiler config, versions,
perfgate version, git commit and branch when known) and a schema version.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from pathlib import Path

from perfgate.errors import CorruptBaselineError, IncompatibleBaselineError, NoBaselineError, StoreError, UsageError
from perfgate import jsonout
from perfgate.metrics import registry
from perfgate.model import FINGERPRINT_SCHEMA, Fingerprint
from perfgate.store.atomic import nearest_existing, write_atomic

BASELINE_FORMAT = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REPAIR = ("restore the file from where the store is kept (cache, artifact) or re-record it: "
           "perfgate baseline save --name {name} CAPTURE")
DEFAULT_DIR = "baselines"


def default_dir() -> Path:
    """``$PERFGATE_BASELINE_DIR`` or ``./baselines``."""
    return Path(os.environ.get("PERFGATE_BASELINE_DIR") or DEFAULT_DIR)  # set but empty = unset


def _parse(data: bytes):
    """Baseline file bytes -> the JSON document. orjson first (a 5,236-step baseline is a 32 MB
    file: 0.16 s against the standard library's 0.44 s); any document orjson refuses (invalid
    UTF-8 or JSON, NaN / Infinity literals, integers beyond 64 bits) is read by the standard
    library, so the accepted documents and the errors raised (UnicodeDecodeError with its byte
    offset, json.JSONDecodeError with its message and position) are the standard library's."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a runtime dependency
        orjson = None
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return jsonout.loads(data.decode("utf-8"))


# the sections of a saved fingerprint and their JSON types (Fingerprint.to_dict)
_SECTIONS = {"provenance": dict, "config": dict, "self_checks": list, "warnings": list, "findings": list,
             "detail": dict}
_CONFIG_KEYS = ("world_size", "ranks")   # a comparison's first question: the same job's ranks?
_JSON_TYPE = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}


def _require_shape(fpd: dict) -> None:
    """Raise ValueError naming the first section of a saved fingerprint that is absent or not of
    its JSON type (``self_checks`` ``null``, ``config`` a string, ...), the first self-check or
    finding that is not an object, or a ``config`` without the rank facts every comparison
    reads: such a baseline is damaged (``baseline show`` says so), never judged as if empty."""
    for key, kind in _SECTIONS.items():
        if not isinstance(fpd.get(key), kind):
            was = _JSON_TYPE.get(type(fpd.get(key)), type(fpd.get(key)).__name__) if key in fpd else "absent"
            raise ValueError(f"{key} is {was}, not {_JSON_TYPE[kind]}")
    for key in ("self_checks", "findings"):
        bad = next((i for i, x in enumerate(fpd[key]) if not isinstance(x, dict)), None)
        if bad is not None:
            raise ValueError(f"{key}[{bad}] is not an object")
    missing = [k for k in _CONFIG_KEYS if k not in fpd["config"]]
    if missing:
        raise ValueError(f"config has no {', '.join(missing)}")
    # the nested parts a comparison reads as a mapping or a list (a hand edit made them a number:
    # exit 70 in the comparison instead of DAMAGED_BASELINE)
    ranks = fpd["config"]["ranks"]
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise ValueError(f"config.ranks is {json.dumps(ranks)[:40]}, not an array of rank numbers")
    for where, value, kind in (("config.coverage", fpd["config"].get("coverage"), dict),
                               ("provenance.steps", fpd["provenance"].get("steps"), dict),
                               ("detail.operators", fpd["detail"].get("operators"), dict),
                               ("detail.segments", fpd["detail"].get("segments"), list),
                               ("detail.step_time", fpd["detail"].get("step_time"), list),
                               ("detail.steps", fpd["detail"].get("steps"), list)):
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{where} is {_JSON_TYPE.get(type(value), type(value).__name__)}, not {_JSON_TYPE[kind]}")
    steps = fpd["provenance"].get("steps")
    if isinstance(steps, dict):
        bad = next((r for r, v in steps.items() if not isinstance(v, list)), None)
        if bad is not None:
            raise ValueError(f"provenance.steps[{bad!r}] is not an array of steps")
    metrics = fpd.get("metrics")
    if isinstance(metrics, dict):
        bad = next((k for k, m in metrics.items()
                    if not isinstance(m, dict) or ("context" in m and not isinstance(m["context"], dict))), None)
        if bad is not None:
            raise ValueError(f"metric {bad!r} is not an object with an object context")


class BaselineStore:
    """Baselines in a folder. ``save`` is atomic; ``load`` fails with exit code 4."""

    def __init__(self, directory=None):
        self.dir = Path(directory) if directory is not None else default_dir()

    def path_for(self, name: str) -> Path:
        """File of baseline ``name``. Raises UsageError for a name with '/', '..', a '.json'
        suffix, other characters than letters, digits, '.', '_', '-', or a first character that
        is not a letter or digit."""
        if (name or "").endswith(".json"):
            raise UsageError(f"baseline name {name!r}: give the name without '.json' (the file is NAME.json)")
        if not _NAME_RE.match(name or ""):
            raise UsageError(f"invalid baseline name {name!r}: use ASCII letters, digits, '.', '_', '-', "
                             f"starting with a letter or digit (no slashes, no hidden '.' file, no leading '-' "
                             f"read as an option), up to 128 characters")
        return self.dir / f"{name}.json"

    def not_a_folder(self) -> Path | None:
        """The store's folder, or its nearest existing parent, when that is a regular file (a store
        that cannot exist, not an empty one); None otherwise."""
        anc = nearest_existing(self.dir)
        return None if anc.is_dir() else anc

    def _require_folder(self) -> None:
        from perfgate.errors import path_too_long
        too_long = path_too_long(self.dir)
        if too_long:
            raise StoreError(f"the baseline store cannot exist: {too_long}", path=self.dir,
                             hint="point --baseline-dir / PERFGATE_BASELINE_DIR at a shorter path")
        bad = self.not_a_folder()
        if bad is not None:
            raise StoreError("the baseline store is not a folder (a regular file is in its place"
                             + ("" if bad == self.dir else f": {bad}") + ")", path=self.dir,
                             hint="point --baseline-dir / PERFGATE_BASELINE_DIR at the folder holding NAME.json "
                                  "files, or restore the folder from where the store is kept")

    def names(self) -> list[str]:
        """Names of the stored baselines (``<dir>/<name>.json``), sorted; [] when the folder is absent.

        Raises:
            StoreError: the folder or a parent of it is a regular file (:meth:`not_a_folder`)."""
        self._require_folder()
        if not self.dir.is_dir():
            return []
        return sorted(p.stem for p in self.dir.glob("*.json") if _NAME_RE.match(p.stem) and not p.name.startswith("."))

    def save(self, name: str, fp: Fingerprint) -> Path:
        """Write baseline ``name`` atomically.

        Raises:
            UsageError: bad name. StoreError: the write failed (old file kept), or a metric is
                not finite or not of its kind (:func:`perfgate.metrics.registry.check_stored`:
                nothing saved).
        """
        path = self.path_for(name)
        bad = sorted(k for k, m in fp.metrics.items() if isinstance(m.value, float) and not math.isfinite(m.value))
        if bad:
            raise StoreError(f"fingerprint metric(s) {', '.join(bad[:5])} are not finite numbers: nothing saved",
                             path=path, hint="a metric perfgate could not compute; report it with the capture")
        for key, m in fp.metrics.items():   # never write what load would call damaged
            try:
                registry.check_stored(key, m)
            except ValueError as e:
                raise StoreError(f"fingerprint {e}: nothing saved", path=path,
                                 hint="a value no capture can hold (a negative time or count, a share "
                                      "outside 0..1); report it with the capture") from None
        doc = {"perfgate_baseline": BASELINE_FORMAT, "name": name,
               "saved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "fingerprint": fp.to_dict()}
        try:
            text = jsonout.dumps(doc, sort_keys=True)  # orjson where exact (a 1M-row baseline: ~0.2 s, not ~1.3 s)
        except (TypeError, ValueError) as e:
            raise StoreError(f"fingerprint is not serialisable: {e}", path=path) from None
        return write_atomic(path, text)

    def name_mismatch(self, name: str, meta: dict) -> str | None:
        """The warning for a baseline file whose stored ``name`` is not its file name (a file
        copied or renamed by hand: which baseline is it?), or None. ``meta``: :meth:`load`'s."""
        stored = meta.get("name")
        if stored == name:
            return None
        return (f"{self.path_for(name)} holds the baseline named {stored!r}, not {name!r}: it is read as "
                f"{name!r} (--baseline {name}); rename the file or re-save it (perfgate baseline save --name "
                f"{name} CAPTURE)")

    def load(self, name: str, *, self_checks: bool = True) -> tuple[Fingerprint, dict]:
        """Read baseline ``name``: ``(fingerprint, document metadata)``.

        ``self_checks=False`` leaves the fingerprint's ``self_checks`` empty: a comparison never
        reads the baseline's own self-checks (they passed when it was saved), and a 5,236-step
        baseline holds ~31k of them (0.15 s of objects per check).

        Raises:
            NoBaselineError: no such baseline (exit 4, NO_BASELINE).
            IncompatibleBaselineError: a fingerprint schema this perfgate does not read (a
                NoBaselineError, exit 4, INCOMPATIBLE_BASELINE; re-record it).
            CorruptBaselineError: the file exists but is damaged: unreadable, not UTF-8, not
                JSON, no format marker, malformed fingerprint (a metric whose value, labels, unit,
                caliber or tier is not of its kind, or stored under another key, name or labels
                than its key's: :func:`perfgate.metrics.registry.check_stored`).
                A StoreError, exit 5: a damaged store is never "no baseline", so
                ``--no-baseline-ok`` cannot pass over it.
        """
        path = self.path_for(name)
        repair = _REPAIR.format(name=name)
        self._require_folder()   # not "no baseline": the store cannot exist where a file is
        if path.is_dir() or (os.path.islink(path) and not path.exists()):
            # NAME.json is there but is no file: a damaged store, never "no baseline" (which
            # --no-baseline-ok passes), and never listed as a baseline that then "does not exist"
            what = "a folder" if path.is_dir() else f"a symbolic link to a missing file ({os.readlink(path)})"
            raise CorruptBaselineError(f"baseline file is {what}, not a baseline", path=path, hint=repair)
        if not path.is_file():
            have = ", ".join(self.names()) or "none"
            where = Path(os.path.abspath(self.dir))
            raise NoBaselineError(f"no baseline named {name!r} in {where} (stored: {have})",
                                  path=path, hint=f"record one with: perfgate baseline save --name {name} CAPTURE; "
                                                  f"a store elsewhere: --baseline-dir DIR or PERFGATE_BASELINE_DIR "
                                                  f"(the default is ./baselines of the working folder)")
        try:
            doc = _parse(path.read_bytes())
        except UnicodeDecodeError as e:
            raise CorruptBaselineError("baseline is not UTF-8 text", path=path, byte_offset=e.start,
                                       hint=repair) from None
        except OSError as e:
            raise CorruptBaselineError(f"cannot read baseline: {e.strerror}", path=path, hint=repair) from None
        except json.JSONDecodeError as e:
            raise CorruptBaselineError(f"baseline is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
                                       path=path, byte_offset=e.pos, hint=repair) from None
        if not isinstance(doc, dict) or doc.get("perfgate_baseline") != BASELINE_FORMAT:
            raise CorruptBaselineError("not a perfgate baseline file (format marker missing or unknown)",
                                       path=path, hint=repair)
        fpd = doc.get("fingerprint")
        if not isinstance(fpd, dict) or "schema" not in fpd:
            raise CorruptBaselineError("baseline holds no fingerprint (or one without its schema)", path=path,
                                       hint=repair)
        if fpd.get("schema") != FINGERPRINT_SCHEMA:
            raise IncompatibleBaselineError(
                f"baseline {name!r} holds fingerprint schema {fpd.get('schema')!r}; this perfgate version "
                f"reads schema {FINGERPRINT_SCHEMA}: re-record it with this perfgate version", path=path,
                hint=f"perfgate baseline save --name {name} CAPTURE")
        try:
            if not isinstance(fpd.get("metrics"), dict) or not fpd["metrics"]:
                raise ValueError("it has no metrics")
            _require_shape(fpd)   # what a comparison reads, checked whether or not it is built here
            fp = Fingerprint.from_dict(fpd if self_checks else {**fpd, "self_checks": []})
            for key, m in fp.metrics.items():
                registry.check_stored(key, m)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptBaselineError(f"baseline fingerprint is malformed: {e}", path=path,
                                       hint=repair) from None
        meta = {k: v for k, v in doc.items() if k != "fingerprint"}
        meta["path"] = str(path)
        return fp, meta
