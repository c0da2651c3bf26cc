"""Fingerprint capture paths: discovery, per-rank work in this process, a local process pool or
a dask.distributed cluster, repeated captures merged, and the model-structure report of a capture.

Layer: above ingest / metrics / history (it reads and fingerprints), below :mod:`perfgate.app.gate`.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from perfgate.terms import TraceMode
from perfgate.errors import InvalidCaptureError, UsageError
from perfgate.metrics.summary import FingerprintConfig
from perfgate.model import Fingerprint


def _summarize_location(loc, config: FingerprintConfig, trace_ahead: bool = False, beside: bool = False):
    """Worker body (module level so process pools and dask can pickle it): one rank's files
    -> its :class:`~perfgate.metrics.summary.RankSummary`. Errors come back as values so every
    rank's problem is reported. ``trace_ahead``: scan a large timeline in one spawned process
    while this one reads the kernel table (:func:`_load_with_trace_ahead`). ``beside``
    (otherwise): a large kernel table's structure stage runs in a thread while this one reads
    the other files and computes the rest
    (:func:`perfgate.metrics.fingerprint.structure_beside`)."""
    from perfgate.ingest import as_capture_error, load_rank, trace_worth_reading_ahead
    from perfgate.metrics.fingerprint import small_rank_gc_paused, structure_beside, summarize_rank
    pre = []
    try:
        if trace_ahead and trace_worth_reading_ahead(loc, config.with_trace) is not None:
            rank, free = _load_with_trace_ahead(loc, config)
            return summarize_rank(rank, config.policy, config.root, free)

        def start(kernels):
            pre.append(structure_beside(kernels, loc.rank, config.policy, config.root) if beside else None)
        with small_rank_gc_paused(loc):   # per-rank fixed cost: no collection mid-rank
            rank = load_rank(loc, with_trace=config.with_trace, pmu=config.read_pmu, shapes=config.read_shapes,
                             after_kernels=start)
            return summarize_rank(rank, config.policy, config.root, pre[0] if pre else None)
    except (InvalidCaptureError, OSError) as e:
        return as_capture_error(e, loc)
    finally:
        if pre and pre[0] is not None:
            pre[0].join()   # a refused rank leaves nothing running


_SCAN_AHEAD = False


@contextmanager
def timelines_scanned_ahead(on: bool = True):
    """Within this block, :func:`fingerprint_path` reading ranks in this process scans a large
    timeline in one spawned process beside the tables (when ``workers`` is not 1 and two CPUs
    are usable; :func:`_load_with_trace_ahead`). Off for library callers unless they ask: a
    spawned process imports the caller's main module again, which must then be guarded by
    ``if __name__ == "__main__":`` (Python's multiprocessing "spawn" rule; the local pool of
    ``workers`` has the same rule). The perfgate command line turns it on."""
    global _SCAN_AHEAD
    previous, _SCAN_AHEAD = _SCAN_AHEAD, on
    try:
        yield
    finally:
        _SCAN_AHEAD = previous


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load_with_trace_ahead(loc, config: FingerprintConfig):
    """:func:`perfgate.ingest.load_rank` with the rank's timeline scanned in one spawned process
    (:func:`local_pool`) while this process reads the kernel table, communication.json and
    step_trace_time.csv, then (while the scan finishes) the parts of the summary that read the
    kernel table alone (:func:`perfgate.metrics.fingerprint.timeline_free_part`): the same
    result and errors as a serial read. The process is stopped as soon as the rank is read or
    refused, so a refused kernel table never waits for the scan.

    Returns:
        ``(RankCapture, timeline-free part or None)`` for :func:`summarize_rank`.

    Measured on a 2-core VM (1M-row rank, 192 MiB trace, ``check`` paired with the serial read):
    see docs/performance.md "Timeline scanned beside the tables"."""
    from perfgate.ingest import load_rank
    from perfgate.metrics.fingerprint import timeline_free_part
    free = []

    def fill(kernels):
        free.append(timeline_free_part(kernels, loc.rank, config.policy, config.root))
    with local_pool(1) as pool:
        try:
            rank = load_rank(loc, with_trace=config.with_trace, pmu=config.read_pmu, shapes=config.read_shapes,
                             trace_pool=pool, while_scanning=fill)
        finally:
            stop_pool(pool)
    return rank, (free[0] if free else None)


AUTO_PARALLEL_BYTES = 64 << 20  # below this a process pool costs more than it saves


def _kernel_bytes(locs) -> int:
    total = 0
    for loc in locs:
        for name in ("kernel_details.csv", "trace_view.json"):
            try:
                total += (loc.output_dir / name).stat().st_size
            except OSError:
                pass
    return total


PARENT_WATCH_S = 0.25   # how often a pool worker checks that its parent is still alive


def _pool_worker_init(parent_pid: int | None = None, main_thread: bool = False) -> None:
    """In each pool process: ignore SIGINT (a Ctrl-C reaches the whole process group; the parent
    alone handles it, it stops the pool, :func:`local_pool`, so workers print no traceback), and
    never outlive the parent ``parent_pid`` (a SIGKILLed ``perfgate`` left spawned workers running
    for ever, holding the caller's stdout pipe):

    - Linux, pool made in the parent's main thread (``main_thread``): ``prctl(PR_SET_PDEATHSIG,
      SIGKILL)``, so the kernel kills the worker when the parent dies (the signal follows the
      thread that spawned the worker, hence only for the main thread, which lives as long as the
      process); then the parent is checked once more, in case it died before the call.
    - everywhere: a daemon thread polls ``os.getppid()`` every :data:`PARENT_WATCH_S` seconds and
      ends the worker (``os._exit``) once it is no longer ``parent_pid`` (re-parented: the parent
      died), the fallback off Linux or when prctl is unavailable.
    """
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is None:
        return
    if main_thread and sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:   # the parent died before the watch began
        os._exit(1)

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(PARENT_WATCH_S)
        os._exit(1)
    import threading
    threading.Thread(target=watch, name="perfgate-parent-watch", daemon=True).start()


def stop_pool(pool, join_s: float = 5.0) -> None:
    """Stop a ProcessPoolExecutor now: pending work cancelled, every worker process terminated
    (SIGTERM, then SIGKILL after ``join_s`` seconds) and reaped, so none outlives its parent.

    A worker killed while it was sending a result (the timeline scan's ~44 MB, a rank summary)
    leaves the pool's manager thread reading the rest of that message from the result pipe,
    whose one other write end is this process's own copy: that copy is closed once the workers
    are gone, so the read ends (end of file), the thread sees a broken pool and exits, and the
    interpreter can exit (it waits for that thread: before, the process hung after printing its
    verdict)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(pool, "_result_queue", None)   # shutdown(wait=False) drops it unclosed
    manager = getattr(pool, "_executor_manager_thread", None)   # and this thread, still running
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.join(join_s)
            if p.is_alive():
                p.kill()
                p.join(join_s)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass
    if procs and all(not _alive(p) for p in procs):
        try:
            results._writer.close()
        except (OSError, AttributeError):
            pass
        if manager is not None:
            manager.join(join_s)   # it holds the pool's queues (their semaphores) until it ends


def _alive(p) -> bool:
    try:
        return p.is_alive()
    except (ValueError, AssertionError):   # already closed / not started by us: not running
        return False


@contextmanager
def local_pool(n: int):
    """A ProcessPoolExecutor of ``n`` spawned processes (``spawn``: no fork of a process holding
    threads). Any exception leaving the block — also KeyboardInterrupt (Ctrl-C) and the CLI's
    SIGTERM exception — stops the workers at once (:func:`stop_pool`) instead of waiting for
    their running tasks; a normal exit waits for them as ``with ProcessPoolExecutor`` does.
    A worker never outlives this process, even SIGKILLed (:func:`_pool_worker_init`). The pool
    is meant to be used (submitted to) from the thread that made it."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    import threading
    pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=_pool_worker_init,
                               initargs=(os.getpid(), threading.current_thread() is threading.main_thread()))
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


@contextmanager
def helper_processes_ended():
    """Within this block, the process pools of :func:`local_pool` may start helper processes;
    when it ends (normally, on an error, on Ctrl-C or the CLI's SIGTERM exception) none of them
    is left running. The pools' workers are joined or stopped by :func:`local_pool`; this ends
    the one helper that would outlive the block: multiprocessing's resource tracker, a process
    the ``spawn`` context starts on first use to unlink the pools' named semaphores should this
    process die. Left alone it ends only once this process has exited (it reads its pipe from
    this process to end of file), so the command returned with it still in its process group,
    keeping a CI step or a container alive. A tracker already running before the block (an
    embedding program's) is left to its owner. The perfgate command line runs every command in
    this block."""
    tracker = _resource_tracker()
    before = getattr(tracker, "_pid", None) is not None
    try:
        yield
    except BaseException as e:
        import traceback
        traceback.clear_frames(e.__traceback__)   # the unwound frames' locals: a pool, a worker being spawned
        raise
    finally:
        tracker = _resource_tracker()
        if not before and getattr(tracker, "_pid", None) is not None:
            _stop_resource_tracker(tracker)


def _resource_tracker():
    """multiprocessing's resource tracker of this process, when multiprocessing was imported."""
    mod = sys.modules.get("multiprocessing.resource_tracker")
    return getattr(mod, "_resource_tracker", None)


def _stop_resource_tracker(tracker) -> None:
    """End the resource tracker and reap it. Every pool's semaphores are finalized first (a
    garbage collection: they unregister themselves from the tracker as they go), because a
    semaphore finalized later would start a new tracker to unregister from, one that again
    outlives this process. Closing its pipe makes the tracker unlink whatever is still registered
    (a worker killed mid-task), warn, and exit; ``_stop`` waits for that exit."""
    import gc
    gc.collect()
    try:
        tracker._stop()
    except (OSError, AttributeError, ChildProcessError, RuntimeError):
        pass   # already gone, or a Python without ``_stop``: it ends once this process does


SCHEDULER_TIMEOUT_S = 10.0


def _require_workers(client, scheduler: str, timeout_s: float = SCHEDULER_TIMEOUT_S) -> None:
    """Wait at most ``timeout_s`` for the scheduler to have a worker: work mapped onto a
    scheduler without one waits forever (a CI gate would hang until the job's own timeout).

    Raises:
        UsageError: no worker joined within ``timeout_s``."""
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - dask's TimeoutError (asyncio's or its own) or a closed connection
        raise UsageError(f"the dask scheduler {scheduler} has no worker (none joined within {timeout_s:g} s): "
                         f"nothing would run the ranks",
                         hint="start workers for it (dask worker tcp://HOST:8786), or drop --scheduler") from None


def _connect_scheduler(client_cls, scheduler: str, timeout_s: float = SCHEDULER_TIMEOUT_S):
    """A dask.distributed client for ``scheduler``, under a hard deadline: the connection is
    made in a daemon thread, because a port that accepts but never answers the dask handshake
    (an HTTP server, a proxy) can block the client past its own timeout, and a port answering
    something else can make it fail in arbitrary ways (a reply read as a frame length).

    Raises:
        UsageError: unreachable, not answering within ``timeout_s`` + 5 s, or not a dask scheduler.
    """
    import threading
    box: dict = {}

    def connect():
        try:
            box["client"] = client_cls(scheduler, timeout=f"{timeout_s:g}s")
        except BaseException as e:  # noqa: BLE001 - any failure here means "not a usable scheduler"
            box["error"] = e
    t = threading.Thread(target=connect, name="perfgate-dask-connect", daemon=True)
    t.start()
    t.join(timeout_s + 5.0)
    hint = "give the scheduler's address (tcp://HOST:8786 by default; 8787 is its dashboard)"
    if t.is_alive():
        raise UsageError(f"the dask scheduler {scheduler} did not answer within {timeout_s + 5:g} s "
                         "(the port accepts connections but does not speak the dask protocol?)", hint=hint)
    if "error" in box:
        e = box["error"]
        raise UsageError(f"cannot reach a dask scheduler at {scheduler}: {type(e).__name__}: {e}"[:600], hint=hint)
    return box["client"]


#: tasks per worker thread on a dask cluster (:func:`_summaries_on_cluster`): enough for the
#: ranks to spread evenly over the workers, few enough that dask's own cost per task (the
#: scheduler's and this process's bookkeeping, one message each way) stays small
TASKS_PER_THREAD = 8


def _summarize_locations(locs, config: FingerprintConfig) -> list:
    """Worker body of one dask task: :func:`_summarize_location` of each of several ranks."""
    return [_summarize_location(loc, config) for loc in locs]


def _summaries_on_cluster(scheduler: str, locs, config: FingerprintConfig, progress=None) -> list:
    """Every rank's :class:`~perfgate.metrics.summary.RankSummary` (or its capture error),
    computed on the dask.distributed cluster at ``scheduler``. The ranks go out in
    :data:`TASKS_PER_THREAD` tasks per worker thread (one rank per task when there are fewer
    ranks): each task is given its ranks' locations (paths, ~0.5 KB each) and a reference to
    ``config`` (sent to the cluster once, not pickled into every task: its policy is ~20 KB), and
    returns their summaries (~120-170 KB a rank whatever its row count: metrics, family view,
    step and kind tables). A task per rank cost the client ~6-8 ms of CPU per rank and the
    scheduler ~3 ms, against a merge of ~1 ms per rank; grouped, dask's cost is paid per task.
    A result is released on its worker as soon as it is here. What is left to this process is
    the merge (:func:`perfgate.metrics.fingerprint.fingerprint_from_summaries`). The files must
    be readable at the same paths on the workers.

    Raises:
        UsageError: no dask.distributed, an unusable scheduler, or one without a worker."""
    from perfgate.errors import require_extra
    Client = require_extra("dask", "--scheduler (dask.distributed)").Client
    client = _connect_scheduler(Client, scheduler)
    results = []
    try:
        _require_workers(client, scheduler, SCHEDULER_TIMEOUT_S)
        from distributed import as_completed
        shared = client.scatter(config, broadcast=True, hash=False)
        threads = max(1, sum(client.nthreads().values()))
        size = max(1, -(-len(locs) // (TASKS_PER_THREAD * threads)))
        groups = [locs[i:i + size] for i in range(0, len(locs), size)]
        futures = client.map(_summarize_locations, groups, config=shared, pure=False)
        for batch in as_completed(futures, with_results=True).batches():
            for fut, summaries in batch:
                results.extend(summaries)
                fut.release()
                if progress:
                    progress(len(results), len(locs))
        del futures
    finally:
        client.close()
    return results


def fingerprint_path(capture_path, policy, *, with_trace=TraceMode.READ, provenance=None, workers: int | None = None,
                     scheduler: str | None = None, progress=None) -> Fingerprint:
    """Discover a capture and fingerprint it, ranks in parallel.

    Args:
        workers: at most this many processes for a local pool (None = every CPU this process
            may run on, :func:`usable_cpus`; 1 = in this process, one thread: otherwise a large kernel
            table's structure stage runs in a second thread, :func:`perfgate.metrics.fingerprint.structure_beside`). A pool starts only when the ranks' kernel tables and traces exceed
            AUTO_PARALLEL_BYTES (64 MiB); below that the work runs in this process, because
            starting the pool would cost more CPU than it saves. Within
            :func:`timelines_scanned_ahead` (the command line), ranks read in this process (one
            rank, or a small capture) with ``workers`` not 1 and two usable CPUs have a
            timeline of at least 64 MiB (``perfgate.ingest.TRACE_AHEAD_BYTES``) scanned in one
            spawned process beside the kernel table.
        scheduler: a dask.distributed scheduler address (``tcp://HOST:PORT``): per-rank work
            is mapped onto that cluster instead (the files must be readable there).
        progress: optional callable ``(done, total)`` called as ranks finish.

    Returns:
        The fingerprint of :func:`perfgate.metrics.fingerprint.fingerprint_from_summaries`.

    Raises:
        UsageError (bad path / scheduler), InvalidCaptureError (every rank's problem listed).
    """
    from perfgate.ingest import discover
    from perfgate.metrics.fingerprint import fingerprint_from_summaries
    locs = discover(capture_path)
    root = Path(capture_path)
    config = FingerprintConfig(policy=policy, root=root, with_trace=with_trace)
    total = len(locs)
    results = []
    if scheduler:
        results = _summaries_on_cluster(scheduler, locs, config, progress)
    else:
        n = min(workers if workers is not None else usable_cpus(), total)
        if n > 1 and _kernel_bytes(locs) <= AUTO_PARALLEL_BYTES:
            # a small capture: each pool process would spend more CPU importing perfgate than
            # its share of the work (--workers 2 on 64 x 200-row ranks: same wall, ~1.5-2x CPU)
            n = 1
        if n > 1 and total > 1:
            from concurrent.futures import as_completed
            with local_pool(min(n, total)) as pool:
                futs = [pool.submit(_summarize_location, loc, config) for loc in locs]
                for fut in as_completed(futs):
                    results.append(fut.result())
                    if progress:
                        progress(len(results), total)
        else:
            # one rank at a time here: with a second CPU free (and more than one process
            # allowed), a large timeline is scanned in another process beside the tables
            two = workers != 1 and usable_cpus() >= 2
            ahead = _SCAN_AHEAD and two
            from perfgate.metrics.fingerprint import finished_ranks_out_of_gc
            with finished_ranks_out_of_gc() as keep:   # per-rank fixed cost: no walks of finished ranks
                for loc in locs:
                    results.append(_summarize_location(loc, config, trace_ahead=ahead, beside=two))
                    keep()
                    if progress:
                        progress(len(results), total)
    problems = sorted((r for r in results if isinstance(r, InvalidCaptureError)), key=lambda e: str(e.path))
    if problems:
        raise InvalidCaptureError.combine(problems)
    return fingerprint_from_summaries(results, policy, root, provenance)


def fingerprint_paths(capture_paths, policy, **kw) -> Fingerprint:
    """One side of a comparison from one or several captures (repeated runs of one commit):
    each is fingerprinted by :func:`fingerprint_path` (same keyword arguments) and the results
    merged by :func:`perfgate.metrics.repeat.merge_fingerprints` (per-step samples pooled,
    ``config["captures"]`` = how many). A single path (str / Path) is one capture.

    Raises:
        UsageError: no capture, or captures of different job configurations.
        InvalidCaptureError: from the first capture that cannot be read.
    """
    from perfgate.metrics.repeat import merge_fingerprints
    paths = [capture_paths] if isinstance(capture_paths, (str, os.PathLike)) else list(capture_paths)
    if not paths:
        raise UsageError("no capture given")
    refuse_same_path(paths)
    fps = [fingerprint_path(p, policy, **kw) for p in paths]
    refuse_same_content(paths, fps)
    return merge_fingerprints(fps)


def refuse_same_path(paths) -> None:
    """Repeated runs must be distinct captures: one path given twice would count as two runs."""
    seen: dict = {}
    for i, p in enumerate(paths, 1):
        key = Path(p).resolve()
        if key in seen:
            raise UsageError(f"capture {p} is given twice (arguments {seen[key]} and {i}); repeated runs must be "
                             f"distinct captures, each counted once")
        seen[key] = i


def refuse_same_content(paths, fps) -> None:
    """Two captures with identical metric values are one capture copied, not two runs (two
    profiling runs never agree to the nanosecond): refused, since they would inflate the sample."""
    from perfgate.history.store import metrics_digest
    if len(fps) < 2:
        return
    seen: dict = {}
    for p, fp in zip(paths, fps):
        d = metrics_digest(fp)
        if d in seen:
            raise UsageError(f"captures {seen[d]} and {p} have identical metric values: the same capture copied, "
                             f"not two runs; give each profiling run once")
        seen[d] = p


def structure_report(capture_path, policy, *, ranks=None, with_trace=TraceMode.NEVER) -> dict:
    """``{"capture", "rules", "counterexamples", "ranks": [{"rank", "steps", "outline", "segments",
    "layers", "classes", "fusion"}]}`` for every rank (or the ranks in ``ranks``); ``outline``:
    {step: the step -> micro-batch -> pass -> layer runs (:func:`perfgate.metrics.segments.outline`)}.
    Row numbers are kernel table data rows; times are µs. ``with_trace``
    (:class:`perfgate.terms.TraceMode`) is honoured as by every command (ALWAYS refuses a rank
    without a timeline; the structure itself needs only the kernel table, so the default is
    NEVER). Partial ranks (no kernel table) are listed with no structure.

    Raises:
        UsageError: the policy has ``segments: null``.
        InvalidCaptureError: unreadable capture, or a segmentation that is not lossless
            (names the rows).
    """
    from perfgate.ingest import load_capture
    from perfgate.metrics import kernels as km
    from perfgate.metrics.fusion import fusion_candidates
    from perfgate.metrics.segments import class_table, outline, segment_rank
    rules = getattr(policy, "segments", None)
    if rules is None:
        raise UsageError("the policy turns segmentation off (segments: null)")
    cap = load_capture(capture_path, with_trace=with_trace)
    out = []
    for r in cap.ranks:
        if ranks is not None and r.rank not in ranks:
            continue
        if r.kernels is None:
            out.append({"rank": r.rank, "kernel_file": None, "partial": list(r.tables)})
            continue
        k = r.kernels.df
        cats = km.categorize(k, policy.categories) if r.kernels.type_available and r.kernels.core_available else None
        seg = segment_rank(k, rules, policy.family_suffix, categories=cats, path=r.kernels.path)
        out.append({"rank": r.rank, "kernel_file": str(r.kernels.path), "steps": km.records(seg.steps),
                    "outline": {str(st): outline(seg, st) for st in seg.steps["step"]},
                    "segments": km.records(seg.segments),
                    "layers": km.records(seg.layers), "classes": km.records(class_table(seg)),
                    "fusion": km.records(fusion_candidates(k, rules.fusion, policy.family_suffix))})
    return {"capture": str(capture_path), "rules": rules.path, "rules_digest": rules.digest,
            "counterexamples": list(rules.counterexamples), "ranks": out}


def structure_text(rep: dict) -> str:
    """:func:`structure_report` as text: per rank and step the hierarchy (step -> micro-batch ->
    pass -> layers -> block kinds, and the named non-layer segments), then the layer classes
    and the fusion candidates."""
    from perfgate.metrics.segments import outline_text
    lines = [f"capture {rep['capture']} (rules {rep['rules']}, digest {rep['rules_digest']})"]
    for r in rep["ranks"]:
        if "steps" not in r:
            lines.append(f"rank {r['rank']}: partial rank (no kernel table; holds {', '.join(r.get('partial') or [])})")
            continue
        for st in r["steps"]:
            lines.append(f"rank {r['rank']} step {st['step']}: {st['microbatches']} micro-batch(es), passes "
                         f"{st['passes'] or 'none'}, {st['layers']} layer segments, {st['rows']} kernel rows")
            lines += outline_text(r["outline"].get(str(st["step"]), []), indent="  ")
        layer_classes = [c for c in r["classes"] if c["level"] == "layer"]
        if layer_classes:
            lines.append(f"rank {r['rank']} layer classes:")
            lines += [f"  {c['class_id']} {c['pass']}: {c['members']} members, blocks {c['kind']}, wall p50 "
                      f"{c['wall_p50_us'] / 1000:.3f} ms, bound {c['bound']}" for c in layer_classes]
        if r["fusion"]:
            by = {}
            for f in r["fusion"]:
                by[(f["pattern"], f["grade"], f["fused"])] = by.get((f["pattern"], f["grade"], f["fused"]), 0) + 1
            lines.append(f"rank {r['rank']} fusion candidates (informational, no claim about gains):")
            lines += [f"  {p} ({g}) x{n} -> {fused}" for (p, g, fused), n in sorted(by.items())]
    return "\n".join(lines) + "\n"
