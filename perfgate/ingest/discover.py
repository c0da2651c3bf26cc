"""Find the rank folders of a capture and read profiler_info_<N>.json.

A CAPTURE is a directory holding one or many rank folders (``*_ascend_pt`` with an
``ASCEND_PROFILER_OUTPUT/``), a single rank folder, or a bare ``ASCEND_PROFILER_OUTPUT/``.
Raw msprof output (``PROF_*/mindstudio_profiler_output/op_summary_*.csv``) is accepted where
no torch_npu output exists beside it. Two shapes without the ``ASCEND_PROFILER_OUTPUT`` name
are read as a rank's output folder: a folder holding its files at its own root (an artifact
upload of the folder's contents, perhaps with ``profiler_info_<N>.json`` beside them: the
capture folder or a rank folder), and a loose ``kernel_details.csv`` given as the capture (its
folder is read). An msprof ``--type=db``
export (``msprof_<ts>.db``) and several msprof runs whose rank nothing records are refused,
naming what was found and the command that gives what perfgate reads.

The rank id comes from the file name ``profiler_info_<N>.json`` (as msprof-analyze
``DataPreprocessor.get_rank_id`` does), else from its ``rank_id`` key (int or string), else
from a ``rank<N>`` folder name (with a warning). ``Device_id`` is never used as the rank. A
file name and a ``rank_id`` (>= 0) that disagree are refused (InvalidCaptureError, exit 3).
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from perfgate import jsonout
from perfgate.errors import InvalidCaptureError, UsageError, path_too_long
from perfgate.ingest.jsonscan import load_error
from perfgate.terms import shown_value

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
MSPROF_DIR = "mindstudio_profiler_output"
_INFO_RE = re.compile(r"^profiler_info_(\d+)\.json$")
_FOLDER_RANK_RE = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
#: a torch_npu DB export's file name, holding its rank
DB_FILE_RE = re.compile(r"ascend_pytorch_profiler_(\d+)\.db")
_MAX_DEPTH = 5
#: the files torch_npu writes into ``ASCEND_PROFILER_OUTPUT/`` (SCHEMAS.md §0): a folder holding
#: them at its own root is that output folder under another name (its name dropped on upload)
_OUTPUT_FILE_RE = re.compile(
    r"^(?:(?:kernel_details|op_statistic|operator_details|step_trace_time)\.csv"
    r"|(?:trace_view|communication|communication_matrix)\.json|ascend_pytorch_profiler_\d+\.db)$")
#: an msprof export in the database format (``msprof --export=on --type=db``): ``msprof_<ts>.db``
_MSPROF_DB_RE = re.compile(r"^msprof_\d+\.db$")
#: the msprof command that writes the text export perfgate reads (mindstudio_profiler_output/)
MSPROF_TEXT_EXPORT = "msprof --export=on --type=text --output={folder}"
#: the names of files a capture holds that perfgate (or the profiler's own tools) read: an output
#: path with such a name inside a capture would replace, or first remove, one of its inputs
INPUT_FILE_RE = re.compile(
    r"^(?:(?:kernel_details|op_summary.*|op_statistic.*|operator_details|step_trace_time|l2_cache|api_statistic"
    r"|communication_matrix|task_time.*)\.csv|(?:trace_view|communication.*|profiler_info.*|profiler_metadata"
    r"|msprof.*)\.json|.*\.db)$", re.IGNORECASE)


#: said for a torch_npu rank folder without its profiler_info_<N>.json (the rank then comes from
#: the folder or DB file name, or is assumed 0)
_NO_INFO = ("{folder} has no profiler_info_<N>.json: the rank number is read from the folder or file name, and "
            "the profiler level, CANN version and collection window are unknown (time values are not "
            "checked against the window)")


#: what an entry that is not what perfgate reads there is, as messages say it (:func:`entry_kind`)
_NOT_READABLE = {
    "folder": "a folder (directory), not a file",
    "file": "a file, not a folder",
    "loop": "a symbolic link loop (the link leads back to itself, so nothing is there to read)",
    "dangling": "a symbolic link to nothing",
    "special": "not a regular file (a FIFO, socket or device)",
}


def entry_kind(p: Path) -> str:
    """What is at ``p``, through symbolic links: ``"file"`` (a regular file), ``"folder"``,
    ``"absent"`` (no entry of that name), ``"dangling"`` (a symbolic link to nothing),
    ``"loop"`` (a symbolic link loop: ``ln -s x x``, or links leading to each other),
    ``"special"`` (a FIFO, socket or device), or ``"unreadable"`` (stat fails otherwise, e.g.
    permission denied: the reader then names the error). Never raises."""
    try:
        st = os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "loop"
        if isinstance(e, (FileNotFoundError, NotADirectoryError)):
            return "dangling" if os.path.islink(p) else "absent"
        return "unreadable"
    except ValueError:   # an embedded NUL: no such file
        return "absent"
    return "file" if stat.S_ISREG(st.st_mode) else "folder" if stat.S_ISDIR(st.st_mode) else "special"


def present_file(p: Path, *, want: str = "file") -> bool:
    """Whether the capture entry ``p`` is there to read: True for a ``want`` (``"file"``: a
    regular file, or ``"folder"``) also through a symbolic link, False when no entry has that
    name. Anything else under the name (a folder where a file is read, a symbolic link loop,
    a link to nothing, a FIFO) is not "not present": the run would go on without what the
    profiler wrote there.

    Raises:
        InvalidCaptureError: naming the path and what is there instead (exit 3)."""
    kind = entry_kind(p)
    if kind in (want, "unreadable"):
        return True   # unreadable: its reader names the error (permission denied, ...)
    if kind == "absent":
        return False
    raise InvalidCaptureError(f"{p.name} is {_NOT_READABLE[kind]}: it cannot be read as the profiler's "
                              f"{'file' if want == 'file' else 'folder'}", path=p,
                              hint="re-export the capture, or remove the entry if the profiler did not write it")


def mixed_levels_warning(levels) -> str | None:
    """The warning for ranks of one capture profiled at different levels (``levels``: the set of
    their profiler_info ``profiler_level`` values, None where not recorded), or None for one level."""
    if len(set(levels)) <= 1:
        return None
    shown = sorted(map(shown_value, set(levels)))
    return f"ranks were profiled at different levels: {shown}"


@dataclass(frozen=True)
class RankLocation:
    """Where one rank's files are: ``rank_dir`` (holds profiler_info), ``output_dir``."""
    rank: int
    rank_dir: Path
    output_dir: Path
    info_path: Path | None
    info: dict
    rank_source: str
    layout: str  # "torch_npu" | "msprof"
    warnings: tuple = ()  # e.g. identical profiler_info copies (:func:`one_profiler_info`)


def _looks_like_rank_folder(d: Path) -> bool:
    """A torch_npu rank folder: named ``*_ascend_pt`` (``<worker>_<pid>_<ts>_ascend_pt``,
    ``rank0_ascend_pt``) or holding a ``profiler_info*.json``."""
    return d.name.endswith("_ascend_pt") or any(d.glob("profiler_info*.json"))


def _below_the_depth_limit(d: Path, levels: int = 256) -> Path | None:
    """The first ``ASCEND_PROFILER_OUTPUT/`` at most ``levels`` folder levels below ``d`` (a
    folder deeper than discovery walks), or None."""
    stack = [(d, 0)]
    while stack:
        cur, depth = stack.pop()
        try:
            kids = sorted(p for p in cur.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            continue
        for k in kids:
            if k.name == OUTPUT_DIR:
                return k
        if depth < levels:
            stack.extend((k, depth + 1) for k in reversed(kids))
    return None


def _find_output_dirs(root: Path, exportless: list | None = None, aliases: list | None = None) -> list[Path]:
    """Output folders under ``root``; rank folders (:func:`_looks_like_rank_folder`) with no
    output folder anywhere below them are appended to ``exportless`` when it is given (one
    holding ``ASCEND_PROFILER_OUTPUT/``'s files at its own root is found as its own output
    folder instead: :func:`_flat_output_files`). A folder
    that is another name of one already walked (a symbolic link ``latest -> rank1_ascend_pt``,
    ``self -> .``) is walked once; ``(link, the folder it names)`` is appended to ``aliases`` when
    given (it read as "two folders claim rank 1", or as a folder too deep below itself).

    Raises:
        InvalidCaptureError: a folder holding an ``ASCEND_PROFILER_OUTPUT/`` of its own beside
            rank folders that hold theirs (a stray copy: read alone it took rank 0's place and
            the ranks were left out), or an output folder deeper than ``_MAX_DEPTH`` levels below
            ``root`` (it would be left out silently)."""
    found: list[Path] = []
    walked: dict[str, Path] = {}

    def walk(d: Path, depth: int):
        try:
            real = os.path.realpath(d)
        except (OSError, ValueError):
            real = None
        if real is not None:
            if real in walked:
                if aliases is not None:
                    aliases.append((d, walked[real]))
                return
            walked[real] = d
        if depth > _MAX_DEPTH:
            deep = _below_the_depth_limit(d)
            if deep is not None:
                raise InvalidCaptureError(
                    f"{deep} lies more than {_MAX_DEPTH + 1} folder levels below the capture folder: it is "
                    f"not searched that deep, so its rank would be left out", path=root,
                    hint="pass the folder that holds the rank folders (or move them up)")
            return
        try:
            entries = sorted(d.iterdir())
        except OSError as e:
            raise InvalidCaptureError(f"cannot list folder: {e.strerror}", path=d,
                                      hint="a rank folder that cannot be read would silently drop a rank") from None
        children = [p for p in entries if p.is_dir()]
        for p in entries:
            if p.name in (OUTPUT_DIR, MSPROF_DIR) or (p.name.endswith("_ascend_pt") and p.is_symlink()):
                present_file(p, want="folder")   # a link loop / link to nothing named as a rank's folder
        names = {c.name for c in children}
        if OUTPUT_DIR in names:
            # rank folders beside it, at any depth below (cap/job/rank*_ascend_pt too)
            ranks_beside = [c.name for c in children if c.name != OUTPUT_DIR and not c.is_symlink()
                            and not c.name.startswith(("PROF_", "FRAMEWORK"))   # a rank's raw data, not ranks
                            and ((c / OUTPUT_DIR).is_dir() or _below_the_depth_limit(c, _MAX_DEPTH) is not None)]
            if ranks_beside:
                shown = ", ".join(ranks_beside[:4]) + (f" (+{len(ranks_beside) - 4} more)" if len(ranks_beside) > 4 else "")
                raise InvalidCaptureError(
                    f"holds an {OUTPUT_DIR}/ of its own beside rank folders with theirs ({shown}): a capture "
                    f"folder is either one rank's folder or a folder of rank folders, not both", path=d,
                    hint=f"move or delete the stray {d / OUTPUT_DIR} (a copy?), or pass one rank folder")
            found.append(d / OUTPUT_DIR)
            return  # raw PROF_* data below a torch_npu rank folder is not a second rank
        before = len(found)
        for c in sorted(children, key=lambda c: c.is_symlink()):   # a folder before a link naming it
            if c.name == MSPROF_DIR and any(c.glob("op_summary*.csv")):
                found.append(c)
            else:
                walk(c, depth + 1)
        if exportless is not None and len(found) == before and _looks_like_rank_folder(d):
            if _flat_output_files(d):   # the export's files at the rank folder's own root: its output folder
                found.append(d)
            else:
                exportless.append(d)

    if root.name in (OUTPUT_DIR, MSPROF_DIR):
        return [root]
    walk(root, 0)
    return found


def _exportless_error(root: Path, folders: list) -> InvalidCaptureError:
    """Rank folders without their export: the "export succeeded but no new file" case."""
    problems = []
    for d in folders:
        held = sorted(p.name for p in d.iterdir())[:6]
        problems.append(InvalidCaptureError(
            f"rank folder has no {OUTPUT_DIR}/ (nor {MSPROF_DIR}/op_summary_*.csv): its export is missing "
            f"(holds: {', '.join(held) or 'nothing'}); reading the other ranks alone would silently drop it",
            path=d, hint="re-run the profiler's export for this rank (torch_npu analyse), or remove the folder "
                         "if the rank was not part of this job"))
    return InvalidCaptureError.combine(problems)


def read_profiler_metadata(rank_dir: Path) -> dict:
    """Job topology from ``profiler_metadata.json`` (written by torch_npu beside profiler_info;
    MindSpeed adds ``distributed_args``, SCHEMAS.md §0, G8.3).

    Returns ``{"world_size": int | None, "rank": int | None, "path": Path | None}``; all None
    when the file or ``distributed_args`` is absent (the G2023 / G2025 samples carry only
    ``ENV_VARIABLES``: no world size is known then).

    Raises:
        InvalidCaptureError: the file is present but unreadable / not JSON, the name holds no
            regular file (a folder, a symbolic link loop, ...: :func:`present_file`), or
            ``distributed_args.world_size`` is not a positive integer.
    """
    path = rank_dir / "profiler_metadata.json"
    if not present_file(path):
        return {"world_size": None, "rank": None, "path": None}
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    try:
        doc = jsonout.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise load_error(path, data, e) from None
    args = doc.get("distributed_args") if isinstance(doc, dict) else None
    if not isinstance(args, dict):
        return {"world_size": None, "rank": None, "path": path}

    def as_int(key):
        v = args.get(key)
        if v is None or isinstance(v, bool):
            return None
        try:
            return int(str(v).strip())
        except ValueError:
            return None

    ws = as_int("world_size")
    if args.get("world_size") is not None and (ws is None or ws < 1):
        raise InvalidCaptureError(f"distributed_args.world_size is not a positive integer: "
                                  f"{args.get('world_size')!r}", path=path)
    return {"world_size": ws, "rank": as_int("rank"), "path": path}


def group_world_size(rank_dir: Path) -> int | None:
    """The job's world size from the communication groups torch_npu records in
    ``profiler_metadata.json`` ``parallel_group_info`` (``{group: {"global_ranks": [...]}}``):
    the size of the union of all groups' global ranks when it is 0..N-1; None when the file or
    the groups are absent (never guessed from the ranks present)."""
    path = rank_dir / "profiler_metadata.json"
    try:
        doc = json.loads(path.read_bytes()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    groups = doc.get("parallel_group_info") if isinstance(doc, dict) else None
    if not isinstance(groups, dict):
        return None
    ranks = set()
    for g in groups.values():
        gr = g.get("global_ranks") if isinstance(g, dict) else None
        if isinstance(gr, list):
            ranks.update(int(x) for x in gr if isinstance(x, int) and not isinstance(x, bool))
    return len(ranks) if ranks and ranks == set(range(len(ranks))) else None


def check_world_size(locs: list, root: Path) -> int | None:
    """The job's world size as recorded (``profiler_metadata.json``
    ``distributed_args.world_size``, :func:`read_profiler_metadata`), or None when no rank
    records it. A capture may hold a subset of the job's ranks (Megatron / MindSpeed
    ``--profile-ranks``; Megatron profiles rank 0 alone by default): that is coverage, recorded
    in the fingerprint (:func:`perfgate.metrics.fingerprint.coverage_config`), not an error.

    Only that recorded field is used: profiler_info_<N>.json carries no world size and
    torch_npu folder names (``<worker>_<pid>_<ts>_ascend_pt``) carry none either.

    Raises:
        InvalidCaptureError: ranks disagree on the world size (ranks of different jobs), a
            rank id lies outside 0..world_size-1, or a rank folder's profiler_metadata.json names
            another rank (``distributed_args.rank``) than the folder's rank id.
    """
    sizes, swapped = {}, []
    for loc in locs:
        if loc.layout != "torch_npu":
            continue
        meta = read_profiler_metadata(loc.rank_dir)
        if meta["rank"] is not None and meta["rank"] != loc.rank:
            swapped.append((loc, meta))
        if meta["world_size"] is not None:
            sizes.setdefault(meta["world_size"], []).append((loc.rank, meta["path"]))
    if not sizes:
        _refuse_swapped_metadata(swapped)
        return None
    if len(sizes) > 1:
        seen = "; ".join(f"world_size {w} in rank(s) {[r for r, _ in v]}" for w, v in sorted(sizes.items()))
        raise InvalidCaptureError(f"the ranks disagree on the job's world size ({seen}): ranks of different "
                                  f"jobs in one capture", path=root,
                                  hint="a capture holds the rank folders of one profiling run")
    (w, holders), = sizes.items()
    present = sorted(loc.rank for loc in locs)
    outside = [r for r in present if not 0 <= r < w]
    if outside:
        raise InvalidCaptureError(f"profiler_metadata.json says world_size {w} but rank(s) {outside} outside "
                                  f"0..{w - 1} are present (ranks {present})", path=holders[0][1])
    _refuse_swapped_metadata(swapped)
    return w


def _refuse_swapped_metadata(swapped: list) -> None:
    """A rank folder whose profiler_metadata.json names another rank (``distributed_args.rank``)
    than the folder's rank id: two rank folders' files swapped (read as they are, a partial
    capture would pass without a word).

    Raises:
        InvalidCaptureError: names the file, both ranks and where the folder's rank came from."""
    if swapped:
        loc, meta = swapped[0]
        raise InvalidCaptureError(
            f"distributed_args.rank is {meta['rank']}, but the folder's rank is {loc.rank} ({loc.rank_source}): "
            f"files of two ranks in one folder", path=meta["path"],
            hint="keep each rank's profiler_metadata.json in its own rank folder, or re-export the run")


def _rank_id(value, path: Path) -> int | None:
    """``rank_id`` of profiler_info_<N>.json: an integer (or its decimal text, e.g. ``"3"``; the
    profiler writes -1 for a run without ranks); absent, null or empty = None.

    Raises:
        InvalidCaptureError: any other value (``"abc"``, ``1.5``, ``true``, a list), naming the file
            and the field: a rank no one can tell would silently drop the file-name check."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,9}\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e9:
        return int(value)
    shown = json.dumps(value, ensure_ascii=False)
    raise InvalidCaptureError(
        f"field rank_id must be an integer (the rank), found {shown[:80]}", path=path,
        hint="the profiler writes profiler_info_<N>.json with rank_id N; restore the file as the profiler wrote it")


def read_profiler_info(path: Path) -> dict:
    """Comparability facets from profiler_info_<N>.json.

    Returns keys ``profiler_level``, ``aic_metrics``, ``export_type``, ``l2_cache``,
    ``torch_npu_version``, ``cann_version``, ``schedule`` (dict), ``rank_id`` (int or None),
    ``collection_end_ns`` (host wall clock when collection ended, ns, or None), ``collection``
    (the profiler's collection options as written, :func:`collection_fields`).

    Raises:
        InvalidCaptureError: the file is empty or not valid JSON (names the byte offset), or its
            ``rank_id`` is not an integer (:func:`_rank_id`).
    """
    try:
        text = path.read_bytes()
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    if not text.strip():
        raise InvalidCaptureError("file is empty", path=path)
    try:
        doc = jsonout.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise load_error(path, text, e) from None

    def obj(v, where):
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise InvalidCaptureError(f"'{where}' must be an object, found {type(v).__name__}", path=path)
        return v

    doc = obj(doc, "top level")
    cfg = obj(doc.get("config"), "config")
    exp = obj(cfg.get("experimental_config"), "config.experimental_config")
    common = obj(cfg.get("common_config"), "config.common_config")
    sched = {str(k).lstrip("_"): v for k, v in obj(common.get("schedule"), "config.common_config.schedule").items()}
    end_info = obj(doc.get("end_info"), "end_info")
    rid = _rank_id(doc.get("rank_id"), path)
    export = exp.get("_export_type")
    if isinstance(export, list):
        export = ",".join(str(x) for x in export)
    return {
        "profiler_level": exp.get("_profiler_level"),
        "aic_metrics": exp.get("_aic_metrics"),
        "export_type": export,
        "l2_cache": exp.get("_l2_cache"),
        "torch_npu_version": doc.get("torch_npu_version"),
        "cann_version": doc.get("cann_version"),
        "schedule": sched,
        "rank_id": rid,
        "collection_end_ns": end_info.get("collectionTimeEnd") if isinstance(end_info.get("collectionTimeEnd"), int) else None,
        "collection": collection_fields(common, exp, sched),
    }


#: the collection options of ``config.common_config`` read as written (SCHEMAS.md §0)
_COMMON_OPTIONS = ("activities", "with_stack", "record_shapes", "profile_memory", "with_modules", "with_flops")


def collection_fields(common: dict, exp: dict, sched: dict) -> dict:
    """The profiler's collection options of one profiler_info file, as written: the
    ``config.common_config`` switches (:data:`_COMMON_OPTIONS`), ``schedule`` (keys without
    G2023's leading ``_``) and ``experimental_config._l2_cache`` as ``l2_cache``. A field the
    file does not hold is left out (never read as false); judged by
    :mod:`perfgate.metrics.collection`."""
    out = {k: common[k] for k in _COMMON_OPTIONS if k in common}
    if sched:
        out["schedule"] = dict(sched)
    if "_l2_cache" in exp:
        out["l2_cache"] = exp["_l2_cache"]
    return out


def _first_difference(a, b, where: str = "") -> str:
    """The key path (``end_info.collectionTimeEnd``) of the first value two JSON documents differ in."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}{k}"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{where}{k}.")
    return where.rstrip(".") or "the top level"


def one_profiler_info(rank_dir: Path, infos: list) -> tuple[Path | None, tuple]:
    """The one profiler_info file of a rank folder, and the warnings its choice leaves.

    The profiler writes exactly one file per rank folder: ``profiler_info_<N>.json`` (rank N) or,
    in a single-card run, ``profiler_info.json`` (SCHEMAS.md §0). Each file claims a rank: the
    ``<N>`` of its name, else its ``rank_id`` when >= 0, else none. Several files in one folder
    are judged on what they prove:

    * they claim different ranks (``profiler_info_0.json`` and ``profiler_info_7.json``, or a
      numbered file beside a rankless ``profiler_info.json``): the folder's one
      ``ASCEND_PROFILER_OUTPUT/`` (kernel table, timeline, ...) holds one rank's data, and which
      rank cannot be told: refused;
    * they claim the same rank but differ in content (another run's collection window, level or
      config): which one describes this export cannot be told (the collection window bounds every
      kernel start): refused, naming the first differing field;
    * identical content (a stray copy, e.g. ``profiler_info_0 (1).json``): every fact read from
      it is the same whichever is read, so the numbered one is read (the first by name otherwise)
      and a warning names the copies.

    Raises:
        InvalidCaptureError: the cases refused above, naming every file (and its rank); any file
            unreadable, not JSON, or with a ``rank_id`` that is not an integer or disagrees with its
            name (:func:`read_profiler_info`)."""
    if len(infos) <= 1:
        return (infos[0] if infos else None), ()
    claims, docs = {}, {}
    for p in infos:
        info = read_profiler_info(p)
        rid = info.get("rank_id")
        m = _INFO_RE.match(p.name)
        if m and rid is not None and rid >= 0 and rid != int(m.group(1)):
            raise InvalidCaptureError(
                f"{p.name}: the file name says rank {int(m.group(1))}, its rank_id says {rid}", path=p,
                hint="the profiler writes profiler_info_<N>.json with rank_id N; restore the file as the profiler wrote it")
        claims[p] = int(m.group(1)) if m else (rid if rid is not None and rid >= 0 else None)
        docs[p] = jsonout.loads(p.read_bytes())
    names = ", ".join(p.name for p in infos)
    if len(set(claims.values())) > 1:
        shown = ", ".join(f"{p.name}: rank {c}" if c is not None else f"{p.name}: no rank" for p, c in claims.items())
        raise InvalidCaptureError(
            f"{len(infos)} profiler_info files name different ranks ({shown}): the rank of {OUTPUT_DIR}/ beside "
            f"them (its kernel table and every other file) is ambiguous", path=rank_dir,
            hint="one rank folder per rank: the profiler writes one profiler_info_<N>.json beside each rank's "
                 f"{OUTPUT_DIR}/; move each rank's files to its own folder, or remove the file that does not belong")
    first = infos[0]
    for p in infos[1:]:
        if docs[p] != docs[first]:
            rank = claims[first]
            raise InvalidCaptureError(
                f"{len(infos)} profiler_info files ({names}) {'both' if len(infos) == 2 else 'all'} say {'rank ' + str(rank) if rank is not None else 'no rank'} "
                f"but differ in {_first_difference(docs[first], docs[p])} ({first.name} vs {p.name}): written by "
                f"different runs, so which one describes {OUTPUT_DIR}/ cannot be told", path=rank_dir,
                hint="keep the profiler_info file written with this export and remove the other")
    chosen = next((p for p in infos if _INFO_RE.match(p.name)), first)
    return chosen, (f"{len(infos)} identical profiler_info files in {rank_dir.name}/ ({names}): {chosen.name} "
                    f"read (the profiler writes one per rank folder; remove the copy)",)


def msprof_rank(prof_dir: Path) -> tuple[int | None, str]:
    """Rank of a raw msprof ``PROF_*`` folder from ``device_<N>/info.json.<N>`` ``rank_id``
    (as msprof-analyze ``msprof_data_preprocessor`` reads it); ``(None, "")`` when no such file
    carries a non-negative rank id.

    Raises:
        InvalidCaptureError: the file is not JSON or not a regular file (:func:`present_file`), or
            the folder's devices name different ranks.
    """
    found = {}
    for f in sorted(prof_dir.glob("device_*/info.json.*")):
        present_file(f)
        try:
            data = f.read_bytes()
        except OSError as e:
            raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=f) from None
        try:
            doc = json.loads(data)
        except ValueError as e:   # JSONDecodeError, UnicodeDecodeError
            raise load_error(f, data, e) from None
        rid = doc.get("rank_id") if isinstance(doc, dict) else None
        try:
            rid = int(str(rid).strip()) if rid is not None and not isinstance(rid, bool) else None
        except ValueError:
            rid = None
        if rid is not None and rid >= 0:
            found[f] = rid
    if len(set(found.values())) > 1:
        shown = ", ".join(f"{f.parent.name}/{f.name}: {r}" for f, r in found.items())
        raise InvalidCaptureError(f"one PROF_ folder names several ranks ({shown}): one PROF_ folder per rank",
                                  path=prof_dir)
    if found:
        f, rid = next(iter(found.items()))
        return rid, f"rank_id in {f.parent.name}/{f.name}"
    return None, ""


def discover(path) -> list[RankLocation]:
    """List the ranks of a capture, sorted by rank id.

    Raises:
        UsageError: the path is empty.
        InvalidCaptureError: the path does not exist or is not a directory (exit 3, as an empty
            folder: the profiling step left no capture); no rank output folder under it; a rank folder (``*_ascend_pt`` or
            one holding profiler_info*.json) without its ``ASCEND_PROFILER_OUTPUT/`` (every such
            folder is listed in ``problems``); two folders claim the same rank; several folders
            whose rank cannot be determined; ranks that disagree on the recorded world size or
            lie outside it (:func:`check_world_size`; a subset of the job's ranks is accepted);
            several profiler_info files in one rank folder naming different ranks, or the same rank
            with different contents (:func:`one_profiler_info`; identical copies: a warning); the
            capture path, an ``ASCEND_PROFILER_OUTPUT`` / ``mindstudio_profiler_output`` /
            ``*_ascend_pt`` entry or a profiler_info / profiler_metadata file that is something
            else under its name (a symbolic link loop, a link to nothing, a file where a folder
            belongs or a folder where a file belongs: :func:`present_file`), named, never
            taken as absent; only an msprof ``--type=db`` export (:func:`_msprof_db_error`).

    A folder holding ``ASCEND_PROFILER_OUTPUT/``'s files at its own root (the capture folder, or
    a rank folder: ``*_ascend_pt`` or one holding profiler_info), and a loose
    ``kernel_details.csv`` given as the capture, are read as a rank's output folder
    (:func:`_flat_output_files`), with a warning naming the shape.
    """
    root, loose = _capture_root(path)
    outs, aliases = _rank_output_dirs(root, loose)
    found = [_locate_rank(out, loose=loose) for out in outs]
    locs = _assume_single_rank(root, [loc for loc in found if loc.rank is not None],
                               [loc for loc in found if loc.rank is None])
    _refuse_duplicate_ranks(locs, root)
    check_world_size(locs, root)
    refuse_copied_rank_files(locs)
    locs = sorted(locs, key=lambda x: x.rank)
    if aliases and locs:
        shown = "; ".join(f"{a.relative_to(root) if a.is_relative_to(root) else a} -> "
                          f"{b.relative_to(root) if b.is_relative_to(root) else b}" for a, b in aliases[:3])
        locs[0] = replace(locs[0], warnings=tuple(locs[0].warnings) + (
            f"{len(aliases)} folder(s) name a folder already read ({shown}): read once",))
    return locs


def _capture_root(path) -> tuple[Path, bool]:
    """The capture path as a folder that exists, and whether it was given as a loose
    ``kernel_details.csv`` (then its folder is the capture; errors as :func:`discover`'s)."""
    if str(path).strip() == "":
        raise UsageError("capture path is empty")
    root = Path(path)
    too_long = path_too_long(root)
    if too_long:   # os.stat would raise ENAMETOOLONG: an internal error instead of this
        raise InvalidCaptureError(f"capture path cannot exist: {too_long}", path=root,
                                  hint="the profiling step wrote no capture here; check the path")
    if entry_kind(root) in ("loop", "dangling"):
        present_file(root, want="folder")
    if not root.exists():  # the profiling step failed or wrote elsewhere: an invalid capture, as an empty folder
        raise InvalidCaptureError("capture directory does not exist", path=root,
                                  hint="the profiling step wrote no capture here; check its log and the path")
    if root.is_file() and root.name == "kernel_details.csv":   # a loose kernel table: its folder is one rank
        return root.parent, True
    if not root.is_dir():
        raise InvalidCaptureError(f"capture must be a directory (a run folder, a *_ascend_pt folder or an "
                                  f"ASCEND_PROFILER_OUTPUT folder), got a file: {root}", path=root,
                                  hint="point perfgate at the folder that holds the *_ascend_pt rank folders")
    return root, False


def _rank_output_dirs(root: Path, loose: bool = False):
    """The ranks' output folders under ``root`` and the folder aliases read once (symbolic links
    to a folder already found). ``root`` itself is the one output folder when it holds
    ``ASCEND_PROFILER_OUTPUT/``'s files at its own root (:func:`_flat_output_files`) and no
    torch_npu output lies below it, or when ``loose`` (the capture was its kernel_details.csv).
    Refused: a rank folder without its export, a folder name that is not UTF-8 (Arrow and SQLite
    cannot open files under it), an msprof ``--type=db`` export (:func:`_msprof_db_error`), no
    output folder."""
    exportless: list[Path] = []
    aliases: list = []
    flat = _flat_output_files(root) if root.name not in (OUTPUT_DIR, MSPROF_DIR) else []
    if loose and flat:   # the kernel table's own folder, not what lies below it
        return [root], aliases
    outs = _find_output_dirs(root, exportless, aliases)
    if flat and not exportless and all(out.name == MSPROF_DIR for out in outs):
        # the files at the root are the rank's export; msprof's raw PROF_* data below is not a second rank
        return [root], aliases
    if exportless:
        raise _exportless_error(root, exportless)
    for out in outs:
        try:
            str(out).encode("utf-8")
        except UnicodeEncodeError:   # a byte that is not UTF-8 in a folder name: Arrow and SQLite cannot open it
            shown = str(out).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise InvalidCaptureError(f"the folder name {shown} is not valid UTF-8: the CSV, JSON and SQLite "
                                      f"readers cannot open files under it", path=shown,
                                      hint="rename the folder (or the run folder above it) to a UTF-8 name") from None
    if not outs:
        dbs = _msprof_dbs(root)
        if dbs:
            raise _msprof_db_error(root, dbs)
        raise InvalidCaptureError(
            f"no {OUTPUT_DIR}/ (torch_npu) or {MSPROF_DIR}/op_summary_*.csv (msprof) folder found "
            f"within {_MAX_DEPTH} levels", path=root,
            hint="point perfgate at the folder that holds the *_ascend_pt rank folders")
    return outs, aliases


def _flat_output_files(folder: Path) -> list[str]:
    """The names of the files torch_npu writes into ``ASCEND_PROFILER_OUTPUT/`` that ``folder``
    holds at its own root (:data:`_OUTPUT_FILE_RE`: kernel_details.csv, trace_view.json,
    step_trace_time.csv, ...), sorted; empty when it holds none or cannot be listed."""
    try:
        return sorted(p.name for p in folder.iterdir() if _OUTPUT_FILE_RE.match(p.name) and p.is_file())
    except OSError:
        return []


def _flat_warning(folder: Path, loose: bool) -> str:
    """The warning for a folder read as a rank's output folder under another name."""
    files = _flat_output_files(folder)
    shown = ", ".join(files[:5]) + (f" (+{len(files) - 5} more)" if len(files) > 5 else "")
    if loose:
        return (f"the capture is a loose kernel_details.csv: its folder {folder} is read as one rank's "
                f"{OUTPUT_DIR}/ ({shown})")
    return (f"{folder} holds {OUTPUT_DIR}/'s files at its own root ({shown}): read as the rank's {OUTPUT_DIR}/ "
            f"whose folder name was dropped")


def _msprof_dbs(root: Path) -> list[Path]:
    """The msprof ``--type=db`` exports (``msprof_<ts>.db``) at most ``_MAX_DEPTH`` + 1 folder
    levels below ``root`` (symbolic links to folders are not followed), sorted."""
    found = []
    for here, dirs, files in os.walk(root):
        depth = len(Path(here).relative_to(root).parts)
        if depth > _MAX_DEPTH:
            dirs[:] = []
        dirs.sort()
        found.extend(Path(here) / f for f in files if _MSPROF_DB_RE.match(f))
    return sorted(found)


def _msprof_db_error(root: Path, dbs: list) -> InvalidCaptureError:
    """An msprof export in the database format and no text export beside it: names the
    databases found and the msprof command that writes the text export perfgate reads, run on
    the ``PROF_*`` folder the first database lies in (its own folder when none is named so)."""
    shown = ", ".join(str(d.relative_to(root)) for d in dbs[:3]) + (f" (+{len(dbs) - 3} more)" if len(dbs) > 3 else "")
    prof = next((f for f in [dbs[0].parent, *dbs[0].parent.parents] if f.name.startswith("PROF_")), dbs[0].parent)
    return InvalidCaptureError(
        f"found {shown}: an msprof export in the database format (msprof --type=db), which perfgate does not "
        f"read; it reads msprof's text export ({MSPROF_DIR}/op_summary_*.csv) and torch_npu's {OUTPUT_DIR}/ "
        f"(text, or ascend_pytorch_profiler_<N>.db)", path=root,
        hint=f"export the run as text: `{MSPROF_TEXT_EXPORT.format(folder=prof)}`, then point perfgate at {prof}")


def _locate_rank(out: Path, *, loose: bool = False) -> RankLocation:
    """One output folder's rank location; ``rank`` None when nothing names it. The rank is
    taken, in order, from the profiler_info_<N>.json file name (its rank_id must agree), that
    file's rank_id, the msprof files, the DB file name, the ``rank<N>`` folder name. An output
    folder under another name (its files at a folder's own root) is its own rank folder
    (profiler_info beside its files) and says so in a warning (``loose``: it was given as its
    kernel_details.csv)."""
    flat = out.name not in (OUTPUT_DIR, MSPROF_DIR)
    rank_dir = out if flat else out.parent
    layout = "msprof" if out.name == MSPROF_DIR else "torch_npu"
    chosen, loc_warnings = one_profiler_info(rank_dir, sorted(p for p in rank_dir.glob("profiler_info*.json")
                                                              if present_file(p)))
    info_path, info, rank, source = _rank_from_profiler_info(chosen)
    if rank is None and layout == "msprof":
        rank, source = msprof_rank(rank_dir)
    if rank is None:
        dbs = sorted(out.glob("ascend_pytorch_profiler_*.db"))
        m = DB_FILE_RE.fullmatch(dbs[0].name) if dbs else None
        if m:
            rank, source = int(m.group(1)), f"DB file name {dbs[0].name}"
    named = _FOLDER_RANK_RE.search(rank_dir.name)
    if rank is None and named:
        rank, source = int(named.group(1)), f"folder name {rank_dir.name} (no profiler_info_<N>.json)"
    elif rank is not None and named and int(named.group(1)) != rank:
        # torch_npu names the folder by worker, not rank, but a rank<N> folder holding another
        # rank's files is a moved or renamed folder: read by its files' word, said
        loc_warnings = tuple(loc_warnings) + (
            f"folder {rank_dir.name} is named for rank {int(named.group(1))} but holds rank {rank} ({source}): "
            f"read as rank {rank}",)
    if info_path is None and layout == "torch_npu":
        loc_warnings = tuple(loc_warnings) + (_NO_INFO.format(folder=rank_dir.name),)
    if flat:
        loc_warnings = (_flat_warning(out, loose),) + tuple(loc_warnings)
    return RankLocation(rank, rank_dir, out, info_path, info, source, layout, loc_warnings)


def _rank_from_profiler_info(chosen: Path | None):
    """(info_path, info, rank, source) from the rank folder's profiler_info file (None: no
    file): the rank from its ``profiler_info_<N>.json`` name, else its rank_id.

    Raises:
        InvalidCaptureError: the file name and the rank_id name different ranks.
    """
    if chosen is None:
        return None, {}, None, ""
    rank, source = None, ""
    m = _INFO_RE.match(chosen.name)
    if m:
        rank, source = int(m.group(1)), f"file name {chosen.name}"
    info = read_profiler_info(chosen)
    rid = info.get("rank_id")
    if rank is not None and rid is not None and rid >= 0 and rid != rank:
        # the profiler writes profiler_info_<N>.json with rank_id N: a file renamed or
        # edited by hand; neither can be preferred on the files' word
        raise InvalidCaptureError(
            f"{chosen.name}: the file name says rank {rank}, its rank_id says {rid}",
            path=chosen, hint="the profiler writes profiler_info_<N>.json with rank_id N; "
                              "restore the file as the profiler wrote it")
    if rank is None and rid is not None and rid >= 0:
        rank, source = info["rank_id"], f"rank_id in {chosen.name}"
    return chosen, info, rank, source


def _assume_single_rank(root: Path, locs: list, unknown: list) -> list:
    """``locs`` plus the folders whose rank nothing names: one such folder alone is rank 0.

    Raises:
        InvalidCaptureError: several such folders, or one beside named ranks.
    """
    if not unknown:
        return locs
    if len(unknown) == 1 and not locs:
        return [replace(unknown[0], rank=0, rank_source="assumed 0: single rank without profiler_info_<N>.json")]
    if not locs and all(loc.layout == "msprof" for loc in unknown):
        runs = [loc.rank_dir for loc in unknown]
        shown = ", ".join(str(r.relative_to(root)) for r in runs[:4]) + (
            f" (+{len(runs) - 4} more)" if len(runs) > 4 else "")
        raise InvalidCaptureError(
            f"found {len(runs)} msprof runs ({shown}) and no rank recorded for any of them (no "
            f"device_*/info.json.<N> rank_id): they cannot be read as the ranks of one job", path=root,
            hint=f"point perfgate at one run, e.g. `perfgate check --baseline NAME {runs[0]}`")
    raise InvalidCaptureError(
        f"cannot tell the rank of {len(unknown)} folder(s), e.g. {unknown[0].rank_dir}: no "
        f"profiler_info_<N>.json and no rank number in the folder name", path=root,
        hint=f"restore each rank folder's profiler_info_<N>.json, or point perfgate at one rank folder, e.g. "
             f"`perfgate check --baseline NAME {unknown[0].rank_dir}`")


def _refuse_duplicate_ranks(locs: list, root: Path) -> None:
    """Raises InvalidCaptureError when two folders claim the same rank (runs mixed in one folder)."""
    seen: dict[int, Path] = {}
    for loc in locs:
        if loc.rank in seen:
            raise InvalidCaptureError(
                f"two folders claim rank {loc.rank}: {seen[loc.rank]} and {loc.rank_dir}", path=root,
                hint="a capture holds one folder per rank; do not mix runs in one directory")
        seen[loc.rank] = loc.rank_dir


#: the files each rank writes with its own tasks' times, by role: (file name patterns, what the
#: refusal says, whether a file's bytes hold any time at all). communication.json without an op
#: (``{}``, steps without ops) and a kernel table without a data row hold none.
_OWN_TIMES = (
    (("communication.json",), "every rank writes its own ops' times",
     lambda data: b'"Communication Time Info"' in data),
    (("kernel_details.csv", "op_summary*.csv"), "two ranks cannot run the same tasks at the same times",
     lambda data: data.rstrip(b"\r\n").count(b"\n") >= 1),
)


def refuse_copied_rank_files(locs: list) -> None:
    """Two ranks of one capture cannot hold the same file of their own tasks' times
    (:data:`_OWN_TIMES`): communication.json (each rank writes its own ops' timestamps and times;
    a copy of rank 0's file in a partial rank 1's folder would otherwise pass as rank 1's
    communication) and the kernel table (kernel_details.csv, op_summary slices: two devices
    cannot run the same tasks at the same ns starts, so a rank folder copied from another rank's,
    its communication.json left out, is refused too). Only files of one role, of equal size and
    equal first 64 KiB are read whole and compared by content (SHA-256); files holding no time
    are left alone; nothing else is read.

    Raises:
        InvalidCaptureError: names both files."""
    for names, why, holds_times in _OWN_TIMES:
        by_size: dict = {}
        for loc in locs:
            for p in sorted({q for name in names for q in loc.output_dir.glob(name)}):
                try:
                    if p.is_file():
                        by_size.setdefault(p.stat().st_size, []).append((loc.rank, p))
                except OSError:
                    continue
        for same in by_size.values():
            if len(same) > 1:
                _refuse_same_content(same, why, holds_times)


def _refuse_same_content(files: list, why: str, holds_times) -> None:
    """``files``: (rank, path) of one role and one size. Raises InvalidCaptureError naming two
    of them, of different ranks, with the same bytes that ``holds_times``."""
    import hashlib
    by_head: dict = {}
    for rank, p in files:
        try:
            with open(p, "rb") as f:
                by_head.setdefault(f.read(64 << 10), []).append((rank, p))
        except OSError:
            continue
    for group in by_head.values():
        seen: dict = {}
        for rank, p in group if len(group) > 1 else ():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            if not holds_times(data):   # no time anyone could have copied
                continue
            digest = hashlib.sha256(data).hexdigest()
            other = seen.get(digest)
            if other is not None and other[0] != rank:
                raise InvalidCaptureError(
                    f"is byte for byte the {other[1].name} of rank {other[0]} ({other[1]}): {why}, so one "
                    f"of them is a copy", path=p, hint="put each rank's own files back, or re-export the run")
            seen[digest] = (rank, p)


def output_among_inputs(path, captures) -> str | None:
    """Why the output ``path`` would land among a capture's input files, or None when it does not.

    ``path`` is resolved as a write resolves it (a symbolic link: its target, which is what an
    atomic write replaces and a stale-output removal removes). It lands among the inputs when it
    lies inside one of ``captures`` (resolved; a missing capture is skipped) and either its name
    is one a capture's files have (:data:`INPUT_FILE_RE`: ``kernel_details.csv``,
    ``op_summary_*.csv``, ``trace_view.json``, ``profiler_info_<N>.json``, ``*.db``, ...) or a
    folder it is in, up to the capture itself, is a profiler output folder
    (``ASCEND_PROFILER_OUTPUT``, ``mindstudio_profiler_output``). A report folder beside the rank
    folders (``RUN/perfgate-out``) is not among them."""
    try:
        target = Path(os.path.realpath(path))
    except (OSError, ValueError):   # a path the system cannot hold (too long, NUL): the write says why
        return None
    for cap in captures:
        try:
            root = Path(os.path.realpath(cap))
            if root.is_file() and root.name == "kernel_details.csv":   # a loose kernel table: its folder is read
                root = root.parent
            if not root.is_dir() or (target != root and root not in target.parents):
                continue
        except (OSError, ValueError):   # a capture path that cannot exist: discovery says why (exit 3)
            continue
        if target != root and INPUT_FILE_RE.match(target.name):
            return f"it names a file of the capture {cap} ({target.name})"
        for folder in [target, *target.parents]:
            if folder.name in (OUTPUT_DIR, MSPROF_DIR):
                return (f"it is inside the profiler output folder {Path(cap) / folder.relative_to(root)} of the "
                        f"capture {cap}")
            if folder == root:
                break
    return None


def refuse_outputs_among_inputs(captures, outputs: dict) -> None:
    """Refuse, before anything is removed or written, an output (``outputs``: option name ->
    path; None and ``-`` skipped) that lands among the input files of one of ``captures``
    (:func:`output_among_inputs`): an earlier output is removed before a capture is read, so such
    a path would delete the very file the run then reports missing.

    Raises:
        UsageError (exit 2): naming the option, the path and the capture file or folder."""
    captures = [captures] if isinstance(captures, (str, os.PathLike)) else list(captures)
    for option, path in outputs.items():
        if path is None or str(path) == "-":
            continue
        why = output_among_inputs(path, captures)
        if why:
            raise UsageError(f"{option} {path}: {why}; perfgate never writes among a capture's files",
                             hint=f"point {option} outside the capture's profiler folders, e.g. at its default")
