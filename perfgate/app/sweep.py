"""Sweep: fingerprint every capture under one or more roots (e.g. a TP/DP/EP configuration
sweep) and roll them up into one table, one row per capture.

Discovery (:func:`discover_captures`): every ``ASCEND_PROFILER_OUTPUT/`` (its rank folder's
parent is the capture when the rank folder is named ``*_ascend_pt`` or ``rank<N>``, else the
rank folder itself) and every ``mindstudio_profiler_output/`` holding ``op_summary_*.csv``
(its ``PROF_*`` folder is the capture). Folders holding a kernel table or profiler database
(``kernel_details.csv``, ``op_summary_*.csv``, ``*.db``) outside those layouts are listed too:
they are captures perfgate cannot read, and appear as failed rows with the reason, never
dropped. Symbolic links to folders are followed (a sweep root of links to the runs' storage is
common); a folder reached twice (a link back up the tree, two links to one run) is walked once;
a link whose target does not exist is a failed row.

Captures are fingerprinted in a process pool (:func:`perfgate.app.run.fingerprint_path`, one
process per capture); a result is cached under ``cache_dir`` keyed on the size and mtime of
every file below the capture, the digests of the whole policy and its segment rules and the perfgate
version, so an unchanged capture is not recomputed.

Rollup columns (:data:`COLUMNS`): ``capture`` (path relative to its root), ``status`` (ok |
failed), ``reason``, ``ranks``, ``steps`` (steps of the rank with most), ``step_time_rank0_us``
and ``step_time_p50_us`` (step time ``step.time_us`` = Computing + Communication(Not Overlapped)
+ Free from step_trace_time.csv, else from the timeline's Overlap Analysis; empty where the capture
has neither — raw msprof ``op_summary`` output, say — as ``perfgate check`` says "no step time"
there: the device wall span is not a step time), ``layers`` (model layers on the rank, ``layer.count`` rank0), ``top_step_class`` (the commonest step
class over ranks and steps), ``share_<kind>`` (block-kind ΣDuration shares, p50 over ranks,
ratio), ``comm_us`` (communication per step, busy union, p50 over ranks), ``comm_share``
(communication share of ΣDuration, p50, ratio), ``top_hccl_kind`` (HCCL kind with the largest
ΣDuration), ``max_rank_skew`` / ``max_rank_skew_metric`` (largest (max − min) / mean over ranks
of a step metric), ``self_checks_failed`` (0 in an ok row: a capture whose self-check fails, or
that lost device tasks, is a failed row with the reason ``check`` gives), ``cached``, ``seconds``.

In a capture of several pipeline stages (:mod:`perfgate.metrics.stages`), which has no pooled p50,
every p50 column is the job-level value of :func:`perfgate.metrics.stages.job_p50`: the largest
stage p50 (``max over S of stage<S>.p50``; a pipeline's step ends when its slowest stage ends), each
column on its own, so the shares of two kinds may come from two stages; ``step_time_p50_stage``
names the stage the step time came from (empty with one stage, where every column is the pooled p50).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter
from pathlib import Path

from perfgate.model import parse_metric_key
from perfgate.version import __version__
from perfgate.terms import TraceMode
from perfgate.errors import PerfgateError, StoreError, UsageError, require_extra

OUTPUT_DIR, MSPROF_DIR = "ASCEND_PROFILER_OUTPUT", "mindstudio_profiler_output"
_RANK_DIR = re.compile(r"(_ascend_pt$)|(^|[_-])rank[_-]?\d+$", re.IGNORECASE)
_LOOSE = re.compile(r"^(kernel_details\.csv|op_summary.*\.csv|.*\.db)$")
KINDS = ("attention", "ffn", "moe", "aicpu", "other", "unstructured")
COLUMNS = (["capture", "status", "reason", "ranks", "steps", "step_time_rank0_us", "step_time_p50_us",
            "step_time_p50_stage", "layers",
            "top_step_class"] + [f"share_{k}" for k in KINDS]
           + ["comm_us", "comm_share", "top_hccl_kind", "max_rank_skew", "max_rank_skew_metric",
              "self_checks_failed", "cached", "seconds"])


def discover_captures(roots) -> list[tuple[Path, Path]]:
    """``(root, capture_path)`` for every capture under ``roots`` (module doc), sorted, unique: the
    path as reached under its root (through a link, the link's name), one entry per folder it
    resolves to.

    Raises:
        UsageError: a root that is not a readable folder.
    """
    found: dict[Path, tuple[Path, Path]] = {}   # resolved capture -> (its root, its path under the root)
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise UsageError(f"sweep root is not a folder: {root}")
        covered: set[Path] = set()
        loose: list[Path] = []
        walked: set[Path] = set()
        for d, dirs, files in os.walk(root, onerror=_unreadable, followlinks=True):
            dirs.sort()
            here = Path(d)
            if here.resolve() in walked:   # a link cycle or a second link to a walked folder
                dirs[:] = []
                continue
            walked.add(here.resolve())
            if here.name == OUTPUT_DIR:
                rank_dir = here.parent
                cap = rank_dir.parent if _RANK_DIR.search(rank_dir.name) and rank_dir != root else rank_dir
                found.setdefault(cap.resolve(), (root, cap))
                covered.add(here)
                dirs[:] = []
            elif here.name == MSPROF_DIR and any(f.startswith("op_summary") for f in files):
                found.setdefault(here.parent.resolve(), (root, here.parent))
                covered.add(here)
                dirs[:] = []
            elif any(_LOOSE.match(f) for f in files):
                loose.append(here)
            for f in files:   # a link whose target is gone: a failed row saying so, never dropped
                if os.path.islink(here / f) and not os.path.exists(here / f):
                    found.setdefault(here / f, (root, here / f))
        for d in loose:
            if not any(c == d or c in d.parents for c in covered):
                found.setdefault(d.resolve(), (root, d))
    return sorted(found.values(), key=lambda x: str(x[1]))


def _unreadable(e: OSError):
    raise UsageError(f"cannot list folder {e.filename}: {e.strerror}",
                     hint="an unreadable folder would silently drop captures from the sweep")


_CODE_DIGEST: list = []


def code_digest() -> str:
    """Digest of perfgate's own installed source (every ``.py`` and policy ``.yaml`` file of the
    package, by relative path and content; ~10 ms once per process). The version string alone
    does not change between builds, so a sweep cache filled by an older perfgate would be served
    to a newer one with other rules: captures the current rules refuse listed as "ok"."""
    if not _CODE_DIGEST:
        root = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for f in sorted([*root.rglob("*.py"), *root.rglob("*.yaml")]):
            if "__pycache__" in f.parts:
                continue
            h.update(str(f.relative_to(root)).encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"?")
        _CODE_DIGEST.append(h.hexdigest()[:16])
    return _CODE_DIGEST[0]


def cache_key(capture: Path, policy) -> str:
    """Digest of (relative path, size, mtime_ns, ctime_ns, inode) of every file below ``capture``
    plus the digests of the whole policy (:meth:`perfgate.policy.Policy.digest`) and its segment
    rules, the perfgate version and the digest of its code
    (:func:`code_digest`). The inode change time is in the key because no tool can set it: a
    file rewritten in place with its size and mtime put back (``touch -r``, a restore keeping
    times) still misses the cache, at the price of one recompute after a copy, chmod or rename."""
    h = hashlib.sha256()
    walked: set[Path] = set()
    for d, dirs, files in os.walk(capture, followlinks=True):
        dirs.sort()
        if Path(d).resolve() in walked:
            dirs[:] = []
            continue
        walked.add(Path(d).resolve())
        for f in sorted(files):
            p = Path(d) / f
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(capture)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n".encode())
    seg = policy.segments.digest if getattr(policy, "segments", None) else "-"
    # the whole policy, not its fingerprint rules alone: require_pipe, the self-check tolerances or
    # fail_closed decide whether a capture is "ok" (a policy change was served the old status)
    h.update(f"{policy.digest()}|{seg}|{__version__}|{code_digest()}".encode())
    return h.hexdigest()[:32]


def rollup_row(fp) -> dict:
    """One rollup row (module doc) from a fingerprint."""
    from perfgate.metrics.stages import job_p50_values
    m = fp.metrics
    job = job_p50_values({k: v.value for k, v in m.items()})   # p50 columns: the job-level p50 (module doc)

    def val(key):
        v = m.get(key)
        return None if v is None else v.value

    def p50(key):
        v = job.get(key)
        return None if v is None else v.value

    row = {"ranks": len(fp.provenance.get("ranks", [])),
           "steps": max((len(s) for s in fp.provenance.get("steps", {}).values()), default=0)}
    row["step_time_rank0_us"] = val("step.time_us{view=rank0}")   # None (empty) as check: no step time
    row["step_time_p50_us"] = p50("step.time_us{view=p50}")
    step = job.get("step.time_us{view=p50}")
    row["step_time_p50_stage"] = None if step is None else step.stage
    row["layers"] = val("layer.count{view=rank0}")
    classes = Counter(s["step_class"] for r in fp.detail.get("segments", []) for s in r.get("steps", []))
    row["top_step_class"] = classes.most_common(1)[0][0] if classes else None
    for k in KINDS:
        row[f"share_{k}"] = p50(f"block.share{{kind={k},view=p50}}")
    row["comm_us"] = p50("step.comm_us{view=p50}")
    row["comm_share"] = p50("share.category{category=Comm,view=p50}")
    if row["comm_share"] is None:
        row["comm_share"] = p50("share.core_type{core_type=COMMUNICATION,view=p50}")
    kinds = {parse_metric_key(k)[1]["kind"]: v.value for k, v in job.items() if k.startswith("comm.time_us{")}
    row["top_hccl_kind"] = max(kinds, key=kinds.get) if kinds and max(kinds.values()) > 0 else None
    skews = [(v.value, v.labels.get("metric")) for v in m.values()
             if v.name == "rank.skew_ratio" and str(v.labels.get("metric", "")).startswith("step.")]
    best = max(skews, default=(None, None), key=lambda x: x[0])
    row["max_rank_skew"], row["max_rank_skew_metric"] = best
    row["self_checks_failed"] = sum(1 for c in fp.self_checks if c.status == "fail")
    return row


_ROW_KEYS = frozenset(c for c in COLUMNS if c not in ("capture", "cached"))


def _valid_cached_row(row) -> bool:
    """A cached row as :func:`sweep_one` writes it: an ``ok`` row with every column (scalar
    values), or a ``failed`` row with its reason text. Anything else (a damaged or hand-edited
    cache file: ``null``, ``{"status": "ok"}``) is recomputed, never trusted: a bare
    ``{"status": "ok"}`` would count a failing capture as ok."""
    if not isinstance(row, dict) or "seconds" not in row:
        return False
    if not all(v is None or isinstance(v, (str, int, float)) for v in row.values()):
        return False
    if row.get("status") == "failed":
        return isinstance(row.get("reason"), str) and bool(row["reason"])
    return row.get("status") == "ok" and _ROW_KEYS <= set(row)


def sweep_one(capture, policy) -> dict:
    """Fingerprint one capture into a rollup row; a capture perfgate cannot read, or one that
    ``check`` and ``baseline save`` refuse (a failed self-check, a fail-closed finding such as lost
    device tasks: :func:`perfgate.metrics.fingerprint.require_valid`), gives a ``failed`` row with
    the reason they give, never figures (never raises a :class:`PerfgateError`)."""
    from perfgate.app.run import fingerprint_path
    from perfgate.metrics.fingerprint import fail_closed_of, require_valid
    t0 = time.perf_counter()
    try:
        fp = fingerprint_path(capture, policy, with_trace=TraceMode.AUTO, workers=1)
        require_valid(fp, fail_closed=fail_closed_of(policy), path=capture)
        row = {"status": "ok", "reason": None, **rollup_row(fp)}
    except PerfgateError as e:
        row = {"status": "failed", "reason": f"{e.kind.replace('_', ' ')}: {e.render()}"}
    except OSError as e:
        row = {"status": "failed", "reason": f"cannot read: {e}"}
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def run_sweep(roots, policy, *, cache_dir=None, workers: int | None = None, progress=None):
    """Discover, fingerprint (in parallel, cached) and roll up every capture under ``roots``.

    Args:
        cache_dir: folder for cached rows (None = no cache).
        workers: processes (None = all cores, 1 = in this process).
        progress: optional callable ``(done, total, capture)``.

    Returns:
        ``pandas.DataFrame`` with :data:`COLUMNS`, one row per capture, failed ones included.

    Raises:
        UsageError: a root that is not a folder, or no capture found at all.
    """
    import pandas as pd
    absent = [str(r) for r in roots if not Path(r).exists()]
    if absent:
        raise UsageError(f"sweep root does not exist (not a folder): {', '.join(absent)}")
    caps = discover_captures(roots)
    if not caps:
        raise UsageError(f"no capture found under {', '.join(map(str, roots))}",
                         hint="a capture holds ASCEND_PROFILER_OUTPUT/ or mindstudio_profiler_output/")
    cache = Path(cache_dir) if cache_dir else None
    rows: dict[Path, dict] = {}
    todo, keys = [], {}
    for root, cap in caps:
        if cache is not None:
            keys[cap] = cache_key(cap, policy)
            hit = cache / f"{keys[cap]}.json"
            try:
                row = json.loads(hit.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                row = None
            if _valid_cached_row(row):
                rows[cap] = dict(row, cached=True)
                if progress:
                    progress(len(rows), len(caps), cap)
                continue
        todo.append(cap)
    from perfgate.app.run import usable_cpus
    n = workers or min(usable_cpus(), max(1, len(todo)))  # the CPUs this process may run on (taskset, cpuset)

    def done(cap, row):
        rows[cap] = dict(row, cached=False)
        if cache is not None:
            _save(cache / f"{keys[cap]}.json", row)
        if progress:
            progress(len(rows), len(caps), cap)

    if n > 1 and len(todo) > 1:
        from concurrent.futures import as_completed
        from perfgate.app.run import local_pool
        with local_pool(n) as pool:  # Ctrl-C / SIGTERM stop the workers
            futs = {pool.submit(sweep_one, cap, policy): cap for cap in todo}
            for fut in as_completed(futs):
                done(futs[fut], fut.result())
    else:
        for cap in todo:
            done(cap, sweep_one(cap, policy))
    out = []
    for root, cap in caps:
        rel = os.path.relpath(cap, root)
        name = str(Path(root) / rel) if rel != "." else str(root)
        # a folder name that is not UTF-8 (its bytes as surrogates) is shown with them escaped: the
        # rollup's text columns hold text only (it was exit 70 and no rollup)
        name = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        out.append({**{c: None for c in COLUMNS}, **rows[cap], "capture": name})
    table = pd.DataFrame(out, columns=COLUMNS)
    for c in ("ranks", "steps", "layers", "self_checks_failed"):  # counts stay integers (blank when failed)
        table[c] = pd.to_numeric(table[c]).round().astype("Int64")
    return table


def _save(path: Path, row: dict) -> None:
    from perfgate.store.atomic import write_atomic
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(row, default=str))
    except (OSError, StoreError):
        pass  # a cache that cannot be written only costs a recomputation


def xlsx_available() -> bool:
    """Whether openpyxl (the ``xlsx`` extra) is installed, for sweep.xlsx."""
    try:
        require_extra("xlsx", "the sweep rollup sweep.xlsx")
    except UsageError:
        return False
    return True


def write_rollup(table, out_dir, *, xlsx: bool | None = None) -> dict:
    """Write ``sweep.csv`` and, when openpyxl (the ``xlsx`` extra) is installed, ``sweep.xlsx``
    under ``out_dir`` atomically (temp file + rename). Returns ``{"csv": path, "xlsx": path}``
    (no ``xlsx`` key without openpyxl; ``xlsx`` None = as installed). A base install writes the
    CSV: the spreadsheet is the extra, the rollup is not (it refused the whole sweep before).

    Raises:
        StoreError: a write failed; neither file of this run is left (the sweep removed the
            previous rollup before it started).
    """
    out = Path(out_dir)
    if xlsx is None:
        xlsx = xlsx_available()
    paths = {"csv": out / "sweep.csv", **({"xlsx": out / "sweep.xlsx"} if xlsx else {})}
    tmps = {kind: p.with_name(f".{p.name}.tmp{os.getpid()}") for kind, p in paths.items()}
    placed = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for kind, tmp in tmps.items():   # both written first, then both put in place
            if kind == "csv":
                table.to_csv(tmp, index=False)
            else:
                table.to_excel(tmp, index=False, sheet_name="sweep", engine="openpyxl")
        for kind, p in paths.items():
            os.replace(tmps[kind], p)
            placed.append(p)
    except OSError as e:
        # one rollup or none: a CSV put in place beside an XLSX that could not be is taken back
        for f in [*tmps.values(), *placed]:
            try:
                f.unlink()
            except OSError:
                pass
        raise StoreError(f"cannot write the sweep rollup: {e}", path=out) from None
    return {k: str(v) for k, v in paths.items()}


def summary(table, files: dict) -> dict:
    """JSON summary: capture counts, failed captures with their reasons, cache hits, files."""
    failed = table[table["status"] == "failed"]
    return {"captures": int(len(table)), "ok": int((table["status"] == "ok").sum()),
            "failed": [{"capture": c, "reason": r} for c, r in zip(failed["capture"], failed["reason"])],
            "cached": int(table["cached"].fillna(False).astype(bool).sum()), "files": files}
