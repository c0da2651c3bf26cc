"""Command line: the only module that imports click, prints or exits.

Each command parses its options, calls one library function (:mod:`perfgate.app.gate`,
:mod:`perfgate.app.run`, :mod:`perfgate.history.trend`, :mod:`perfgate.report.writers`, ...) and
renders what it returns. Errors are caught in one place, :class:`_Group`: a PerfgateError prints
its message (path, row, hint) and exits with its code; a command that must write something
first (``perfgate report``'s error page) registers that with :func:`_on_error`.

Exit codes: 0 pass, 1 regression, 2 usage / policy error, 3 invalid capture,
4 no baseline, 5 store error, 70 internal error (see :mod:`perfgate.errors`),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""
from __future__ import annotations

import errno
import io
import json
import shlex
import sys
from pathlib import Path

from perfgate import errors

try:
    import click
except ImportError as _e:   # the command line's own dependency: exit 2 naming it, not a traceback
    _missing = errors.missing_dependency(_e)
    if _missing is None:
        raise
    sys.stderr.write(f"perfgate: usage error: {_missing.render()}\n")
    sys.exit(_missing.exit_code)
from perfgate.version import __version__
from perfgate.errors import PerfgateError
from perfgate.terms import TraceMode

DEFAULT_OUT = "perfgate-out"


def _fail(e: PerfgateError):
    click.echo(f"perfgate: {e.kind.replace('_', ' ')}: {e.render()}", err=True)
    for p in getattr(e, "problems", [])[1:6]:
        msg = p.get("message", "")
        where = p.get("path") or (f"rank {p['rank']}" if p.get("rank") is not None else "")
        if p.get("row") is not None:
            where += f" row {p['row']}"
        click.echo(f"  also: {where + ': ' if where else ''}{msg}", err=True)
    sys.exit(e.exit_code)


def _policy(path):
    from perfgate.app.gate import load_checked_policy
    return load_checked_policy(path)


def _store(directory):
    from perfgate.store.baselines import BaselineStore
    return BaselineStore(directory)


def _inputs(policy_path=None, history_path=None, baseline_dir=None, *, history=True, store=True) -> dict:
    """The files and folders a command reads besides its captures (option -> path, defaults
    resolved as the command resolves them): no report may be written over one of them
    (:func:`perfgate.store.reportpaths.refuse_outputs_on_inputs`)."""
    out = {"--policy": policy_path}
    if history:
        try:
            out["--db"] = _history_path(history_path, only_if_given=True)
        except errors.StoreError:   # a folder named as the database: refused where it is opened, as before
            pass
    if store:
        out["--baseline-dir"] = _store(baseline_dir).dir
    return out


def _kv(values, what, known=None):
    out = {}
    for v in values:
        k, sep, x = v.partition("=")
        if not sep:
            raise click.BadParameter(f"expected FAMILY=FACTOR, got {v!r}", param_hint=what)
        try:
            f = float(x)
        except ValueError:
            raise click.BadParameter(f"factor must be a number in {v!r}", param_hint=what) from None
        if not 0 < f <= 100:
            raise click.BadParameter(f"factor must be in (0, 100], got {x}", param_hint=what)
        if known is not None and k not in known:
            raise click.BadParameter(f"unknown kernel family {k!r}; the synthetic families are: "
                                     f"{', '.join(sorted(known))}", param_hint=what)
        out[k] = f
    return out


common_policy = click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
                             default=None, help="Policy YAML (default: the built-in perfgate/policies/default.yaml).")
# no file_okay=False: a baseline folder that is a regular file is a store problem (exit 5, check's
# reports say DAMAGED_BASELINE), the same for --baseline-dir and $PERFGATE_BASELINE_DIR, never
# click's "Invalid value" (exit 2, no reports) for one spelling only
common_dir = click.option("--baseline-dir", type=click.Path(), default=None,
                          help="Baseline folder (default: $PERFGATE_BASELINE_DIR or ./baselines). A regular file "
                               "in its place (or above it) is a store error, exit 5, however it is given.")
common_trace = click.option("--trace", "trace_mode", type=click.Choice(["auto", "always", "never"]),
                            default="auto", show_default=True,
                            help="Read trace_view.json: auto skips one over 256 MiB when step_trace_time.csv "
                                 "carries the sums the self-checks need (the report says so); always "
                                 "reads it and refuses a rank without one (exit 3).")
no_trace_opt = click.option("--no-trace", is_flag=True, help="Same as --trace never.")
allow_partial_opt = click.option(
    "--allow-partial", is_flag=True,
    help="Judge the comparable rest when more than the policy's max_incomparable_fraction (default 25 %) of "
         "the gated metrics are not comparable (another profiler level or export), instead of "
         "INCOMPATIBLE_BASELINE (exit 4); every report still says how many were left out.")

def report_files_opt(command):
    """The report files a judging command writes: --out, --junit, --markdown, --json."""
    for option in reversed([
        click.option("--out", default=DEFAULT_OUT, show_default=True, type=click.Path(file_okay=False),
                     help="Folder for the report files."),
        click.option("--junit", default=None, type=click.Path(dir_okay=False),
                     help="JUnit XML path (default: perfgate-junit.xml in --out)."),
        click.option("--markdown", default=None, type=click.Path(dir_okay=False),
                     help="Markdown report path (default: perfgate-report.md in --out)."),
        click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False, allow_dash=True),
                     help="JSON result path (default: perfgate-result.json in --out); '-' writes the JSON to "
                          "stdout and the human summary to stderr."),
    ]):
        command = option(command)
    return command



def _policy_for_run(policy_path, allow_partial: bool):
    """The checked policy of ``--policy`` (:func:`_policy`), with no partial-comparison limit under
    ``--allow-partial``."""
    policy = _policy(policy_path)
    return policy.allowing_partial() if allow_partial else policy


def _with_trace(trace_mode, no_trace) -> TraceMode:
    if no_trace and trace_mode == "always":   # a requirement never dropped in silence
        raise errors.UsageError("--no-trace and --trace always contradict each other: give one")
    return TraceMode.NEVER if no_trace else TraceMode.of(trace_mode)


common_history = click.option(
    "--history", "--db", "history_path", default=None, type=click.Path(),
    help="History database (default: $PERFGATE_HISTORY or ./perfgate-history.sqlite): the trend history of "
         "`perfgate history`, --baseline history:BRANCH of `check`, trend sparklines of the HTML reports "
         "(used there when it exists); `check` and `report` only read it; --db is the same option.")
common_workers = click.option("--workers", type=click.IntRange(1, 512), default=None,
                              help="At most this many processes for per-rank work (default: the CPUs this process may "
                                   "run on). A pool starts only when the kernel tables of several ranks exceed 64 MiB "
                                   "together, whatever N; else the ranks are read here, and a timeline of 64 MiB or more "
                                   "is scanned by a second process. 1: everything in this process.")


def _branch_name(ctx, param, value):
    """``--branch``: git refuses control characters in a ref name; here they would forge lines in
    ``baseline list`` and the history tables (a branch such as ``$'evil\\nmain'``)."""
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise click.BadParameter(f"{value!r} holds a control character (a branch name never does)")
    if value is not None and (not value.strip() or value != value.strip()):  # as history:BRANCH reads it
        raise click.BadParameter(f"{value!r}: a branch name is not empty and has no surrounding whitespace")
    return _utf8_text(ctx, param, value)


def _utf8_text(ctx, param, value):
    """An argument that is stored (a branch, a note) must be text: bytes that are not UTF-8 on the
    command line (``$'ma\xffin'``) arrive as lone surrogates, which a baseline or the history
    would keep and every later read fail on."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise click.BadParameter(f"{shown!r} holds bytes that are not UTF-8 text") from None
    return value


class _Progress:
    """Per-rank progress on stderr (rich), only for captures with several ranks and only when
    stderr is a terminal: a CI log (a file or pipe) would get the bar's blank lines instead."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.bar = None
        self.task = None

    def __call__(self, done, total):
        if self.quiet or total < 4 or not sys.stderr.isatty():
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import Progress
            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("fingerprinting ranks", total=total)
        self.bar.update(self.task, completed=done)
        if done >= total:
            self.bar.stop()


EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in perfgate, never a verdict


#: The running command's decided outcome: ``code`` (its exit code, kept when stdout closes) and
#: ``reported`` (``check``: the exit code its written reports state, kept by a later Ctrl-C)
_OUTCOME: dict = {}


def _stdout_to_devnull() -> None:
    """After a BrokenPipeError on stdout (``perfgate ... | head``): send further output and the
    interpreter's final flush to /dev/null instead of raising again."""
    import os
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class _DroppingStderr(io.RawIOBase):
    """File descriptor 2 as a raw stream whose failed write is dropped: stderr carries only
    diagnostics (warnings, progress, the error line), so a reader that went away (``2>&1 | head``),
    a full device (``2>/dev/full``) or a closed descriptor never changes the exit code the command
    decides. At the first failure /dev/null takes the descriptor's place, for this process's later
    writes and for the worker processes it starts."""

    def __init__(self, fd: int):
        super().__init__()
        self._fd = fd
        self._lost = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, b) -> int:
        import os
        n = len(b)
        if not self._lost:
            try:
                while b:
                    b = b[os.write(self._fd, b):]
            except OSError:
                self._lost = True
                try:
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, self._fd)
                    os.close(devnull)
                except OSError:
                    pass
        return n


def _shield_stderr() -> None:
    """Make the process's stderr a :class:`_DroppingStderr` (the console script only: an embedding
    program or CliRunner keeps its own ``sys.stderr``)."""
    err = sys.stderr
    if err is None or err is not sys.__stderr__:
        return
    try:
        fd = err.fileno()
        err.flush()
    except (OSError, ValueError, AttributeError):
        return
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(_DroppingStderr(fd)), encoding=err.encoding,
                                  errors="backslashreplace", line_buffering=True, write_through=True)


def _stdout_failed(e: OSError):
    """A write to standard output failed where no command caught it. A reader that went away
    (``| head``) is not an error: the command's decided exit code stands (:data:`_OUTCOME`, else 0).
    A full device (``-o -``, ``--json -``, a listing into /dev/full) is exit 5, as for a report
    file that cannot be written (whatever the verdict: what CI reads is lost); any other OSError
    is an internal error (exit 70)."""
    if isinstance(e, BrokenPipeError):
        _stdout_to_devnull()
        sys.exit(_OUTCOME.get("code", 0))
    if e.errno not in _WRITE_FULL:
        _internal(e)
    _stdout_to_devnull()
    click.echo(f"perfgate: store error: write to standard output failed: {e.strerror or e}", err=True)
    sys.exit(errors.EXIT_STORE)


def _on_error(handler) -> None:
    """Register what the running command does with a PerfgateError before it is reported (e.g.
    ``perfgate report`` writes the page saying why); :class:`_Group` calls it, then :func:`_fail`."""
    click.get_current_context().meta["perfgate.on_error"] = handler


EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C, as a shell reports it (never 1, the regression code)
EXIT_TERMINATED = 143  # 128 + SIGTERM: the CI runner cancelled the job


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler :func:`_Group.invoke` installs, so the
    running command unwinds (a local process pool stops its workers, :func:`perfgate.app.run.local_pool`)
    and the process exits 143. A BaseException: no ``except Exception`` swallows it."""


def _on_sigterm(signum, frame):
    raise Terminated()


_LEAVES = "perfgate.interrupt_leaves"


def _interrupt_leaves(text: str) -> None:
    """What an interrupt (Ctrl-C, SIGTERM) of the running command leaves, as its line says it
    (default "nothing judged"): ``baseline save`` leaves the store as it was, ``history record``
    the database."""
    click.get_current_context().meta[_LEAVES] = text


def _leaves() -> str:
    ctx = click.get_current_context(silent=True)
    return (ctx.meta.get(_LEAVES) if ctx is not None else None) or "nothing judged"


def _interrupted():
    reported = _OUTCOME.get("reported")
    if reported is not None:   # the reports already say this exit code: it stands
        click.echo(f"\nperfgate: interrupted (Ctrl-C) after the reports were written; their verdict stands "
                   f"(exit {reported})", err=True)
        sys.exit(reported)
    click.echo(f"\nperfgate: interrupted (Ctrl-C); {_leaves()} (exit 130)", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _finished(ctx) -> None:
    """The top-level command finished and said so ("saved baseline ...", its verdict): a Ctrl-C
    from here to the process's end (click's exit, the interpreter's shutdown) changes nothing, so
    it is ignored and the decided exit code stands, never click's "Aborted!" / exit 1 or a death
    by the signal: CI reads the exit code, and it must match what was printed and written.
    :meth:`_Group.main` restores the handler for in-process runs."""
    import signal
    import threading
    if ctx.parent is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Group(click.Group):
    """The one place errors are caught: a PerfgateError becomes its message and its exit code
    (:func:`_fail`, after the command's :func:`_on_error` handler); an unexpected exception one
    clear line and exit 70 (traceback with PERFGATE_DEBUG=1); Ctrl-C (KeyboardInterrupt) one line
    and exit 130; SIGTERM (handler installed while the top-level command runs, then restored) one
    line and exit 143. A closed stdout pipe is not an error: the command's decided exit code
    stands (else 0); stdout on a full device is exit 5 (:func:`_stdout_failed`). Whatever happens
    to stderr (a closed pipe, a full device, a closed descriptor) changes no exit code: the
    console script's stderr drops a failed write (:func:`_shield_stderr`). The top-level command runs under :func:`perfgate.hostmem.small_pages` (numpy's
    huge-page hint off where the kernel would stall on it), :func:`perfgate.hostmem.arrow_jemalloc`
    (Arrow's buffers from jemalloc where pyarrow has it) and
    :func:`perfgate.app.run.timelines_scanned_ahead`, and ends every helper process before it
    returns (:func:`perfgate.app.run.helper_processes_ended`)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's ``main``; afterwards the SIGINT handler :meth:`invoke` set aside is restored when
        perfgate runs inside another program (``args`` given: CliRunner, an embedding). The
        console script (``args`` None) ends with this call: its late Ctrl-C stays ignored."""
        import signal
        import threading
        before = (signal.getsignal(signal.SIGINT)
                  if args is not None and threading.current_thread() is threading.main_thread() else None)
        if args is None:
            _shield_stderr()   # a failed stderr write never changes the exit code
        try:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        finally:
            if before is not None:
                signal.signal(signal.SIGINT, before)

    def make_context(self, info_name, args, parent=None, **extra):
        """The top-level group's own option parsing runs in click's standalone ``main``, outside
        :meth:`invoke`: Ctrl-C there is the same one line and exit 130 (not "Aborted!", exit 1)."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            _interrupted()
        except OSError as e:   # --help / --version into a closed pipe or a full device
            _stdout_failed(e)

    def invoke(self, ctx):
        import contextlib
        import signal
        import threading
        from perfgate.hostmem import small_pages
        previous = None
        if ctx.parent is None:
            _OUTCOME.clear()   # an earlier in-process run's outcome is not this one's
        if ctx.parent is None and threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _on_sigterm)  # restored below (CliRunner, embedding)
        try:
            with contextlib.ExitStack() as top:
                if ctx.parent is None:
                    from perfgate.hostmem import arrow_jemalloc
                    from perfgate.app.run import helper_processes_ended, timelines_scanned_ahead
                    top.enter_context(helper_processes_ended())
                    top.enter_context(small_pages())
                    top.enter_context(arrow_jemalloc())
                    top.enter_context(timelines_scanned_ahead())
                rv = super().invoke(ctx)
            _finished(ctx)
            return rv
        except (click.exceptions.Exit, SystemExit):   # the command decided its exit code
            _finished(ctx)
            raise
        except (click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:  # Ctrl-C: one line, no traceback, 130 (click would say "Aborted!", exit 1)
            _interrupted()
        except Terminated:
            click.echo(f"perfgate: terminated (SIGTERM); any worker processes stopped; {_leaves()} (exit 143)",
                       err=True)
            sys.exit(EXIT_TERMINATED)
        except PerfgateError as e:
            handler = ctx.meta.pop("perfgate.on_error", None)
            if handler is not None:
                try:   # the error stays the one reported: a failing handler never replaces it
                    handler(e)
                except Exception as h:  # noqa: BLE001 - a traceback and exit 1 otherwise
                    click.echo(f"perfgate: warning: while reporting the error: {type(h).__name__}: {h}", err=True)
            _fail(e)
        except OSError as e:   # stderr never raises (_shield_stderr): standard output failed
            _stdout_failed(e)
        except Exception as e:  # noqa: BLE001 - last resort, so CI never sees a bare traceback
            # a dependency that cannot be imported is no bug in perfgate: exit 2 naming the package
            missing = errors.missing_dependency(e)
            if missing is None:
                _internal(e)
            _fail(missing)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


_WRITE_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)   # a full device, quota or file size limit


def _internal(e: Exception):
    """An unexpected exception: one clear line and exit 70 (the traceback with PERFGATE_DEBUG=1)."""
    import os
    if os.environ.get("PERFGATE_DEBUG", "").strip().lower() in ("1", "true", "yes", "on"):
        import traceback
        traceback.print_exc()  # the traceback, and still exit 70 (never 1, the regression code)
    click.echo(f"perfgate: internal error: {type(e).__name__}: {e} (a bug in perfgate; rerun with "
               f"PERFGATE_DEBUG=1 for the traceback)", err=True)
    sys.exit(EXIT_INTERNAL)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="perfgate")
def main():
    """perfgate: a CI performance gate for Ascend NPU profiling captures.

    \b
    perfgate baseline save --name main CAPTURE_A
    perfgate check --baseline main CAPTURE_B
    """


@main.group(cls=_Group)
def baseline():
    """Record, list and show stored baselines."""


@baseline.command("save")
@click.option("--name", required=True, help="Baseline name, e.g. main.")
@click.argument("capture", nargs=-1, required=True, type=click.Path())
@common_policy
@common_dir
@common_trace
@no_trace_opt
@click.option("--commit", default=None, help="Commit SHA to record (default: from CI env or git).")
@click.option("--branch", default=None, callback=_branch_name, help="Branch to record (default: from CI env or git).")
@click.option("--force", is_flag=True, help="Replace a baseline recorded with another rank count or at a commit "
                                           "that descends from this one; write from a merge-queue (merge_group) run.")
@common_workers
def baseline_save(name, capture, policy_path, baseline_dir, trace_mode, no_trace, commit, branch, force, workers):
    """Fingerprint CAPTURE and store it as baseline NAME (atomic; refused for invalid captures,
    partial ones (ranks with different step counts, or a rank with no kernel row in any step; a
    partial *rank* without a kernel table is allowed) and pull-request runs). Several CAPTUREs =
    repeated runs of one commit: their
    per-step samples are pooled for the statistical comparison."""
    _interrupt_leaves(f"no baseline saved: {name!r} in the store is as it was")   # before the slow imports
    from perfgate.app.gate import save_baseline
    from perfgate.history.store import require_commit
    require_commit(commit)   # as history record: a SHA or ref name, one line
    prov = {k: v for k, v in (("commit", commit), ("branch", branch)) if v}
    if commit:
        prov["commit_source"] = "--commit"
    from perfgate.ingest.discover import refuse_outputs_among_inputs
    store = _store(baseline_dir)
    refuse_outputs_among_inputs(_one_or_many(capture), {"--baseline-dir": store.path_for(name)})
    path, fp = save_baseline(_one_or_many(capture), name, policy=_policy(policy_path), store=store,
                             with_trace=_with_trace(trace_mode, no_trace), provenance=prov, force=force,
                             workers=workers, progress=_Progress(False))
    checks = [c for c in fp.self_checks]
    passed = sum(c.status == "pass" for c in checks)
    skipped = sum(c.status == "skipped" for c in checks)
    click.echo(f"saved baseline {name!r} -> {path}")
    job = fp.config.get("job_world_size")
    click.echo(f"  {len(fp.metrics)} metrics, ranks {fp.provenance['ranks']} "
               f"(job world size {job if job is not None else 'not recorded'}), "
               f"self-checks: {passed} passed, {skipped} skipped")
    for w in fp.warnings[:10]:
        click.echo(f"  warning: {w}")


@baseline.command("list")
@common_dir
def baseline_list(baseline_dir):
    """List stored baselines. Exits 5 (store error) when a stored file is damaged, after listing
    every baseline; a baseline of another fingerprint schema is listed, not an error; a file whose
    stored name differs from its file name is listed with a warning naming both."""
    from perfgate.errors import EXIT_STORE, CorruptBaselineError, NoBaselineError
    store = _store(baseline_dir)
    names = store.names()
    if not names:
        where = Path(store.dir).absolute()
        click.echo(f"no baselines in {where}" + ("" if where.is_dir() else " (the folder does not exist; "
                                                   "--baseline-dir names another)"))
    damaged, rows = [], []
    for n in names:   # every file read first: the exit code is decided before a line is printed,
        try:          # so a reader that leaves early (| head -1) cannot turn a damaged store into 0
            fp, meta = store.load(n)
            p = fp.provenance
            rows.append((f"{n}\tsaved {meta.get('saved_at', '?')}\tranks {p.get('ranks')}\t"
                         f"commit {str(p.get('commit') or '-')[:12]}\tbranch {p.get('branch') or '-'}",
                         store.name_mismatch(n, meta)))
        except NoBaselineError as e:
            rows.append((f"{n}\tUNREADABLE: {e.message}", None))
        except CorruptBaselineError as e:
            damaged.append(n)
            rows.append((f"{n}\tUNREADABLE: {e.message}", None))
    if damaged:
        _OUTCOME["code"] = EXIT_STORE
    for line, odd in rows:
        click.echo(line)
        if odd:
            click.echo(f"perfgate: warning: {odd}", err=True)
    if damaged:
        click.echo(f"perfgate: store error (exit 5): {len(damaged)} damaged baseline file(s): {', '.join(damaged)}; "
                   f"restore or re-record them (perfgate baseline save --name NAME CAPTURE)", err=True)
        sys.exit(EXIT_STORE)


@baseline.command("show")
@click.argument("name")
@common_dir
def baseline_show(name, baseline_dir):
    """Print a stored baseline's provenance and config as JSON (a warning on stderr when the
    file's stored name is not NAME)."""
    store = _store(baseline_dir)
    fp, meta = store.load(name)
    odd = store.name_mismatch(name, meta)
    if odd:
        click.echo(f"perfgate: warning: {odd}", err=True)
    click.echo(json.dumps({"meta": meta, "provenance": fp.provenance, "config": fp.config,
                           "metrics": len(fp.metrics)}, indent=1, ensure_ascii=False))


def _print_summary(result, paths, quiet, verbose=False, err=False):
    from perfgate.report.summary import console_lines
    for line in console_lines(result, verbose=verbose, quiet=quiet):
        click.echo(line, err=err)
    for k, p in paths.items():
        click.echo(f"  {k}: {p}", err=err)


@main.command()
@click.option("--baseline", "baseline_name", required=True,
              help="Stored baseline to compare against: a NAME saved by `baseline save`, or history:BRANCH.")
@click.argument("capture", nargs=-1, required=True, type=click.Path())
@common_policy
@common_dir
@common_trace
@no_trace_opt
@report_files_opt
@click.option("--no-baseline-ok", is_flag=True,
              help="Exit 0 (still reporting NO_BASELINE) when the baseline does not exist yet "
                   "(a damaged baseline file or history database still exits 5, DAMAGED_BASELINE, and so does "
                   "a history database that cannot be opened, STORE_ERROR).")
@click.option("--quiet", is_flag=True, help="Only the verdict line and report paths (and, when the capture "
                                            "or store is refused, the reason and its hint).")
@click.option("-v", "--verbose", is_flag=True, help="Every line in full (nothing cut at the right): every cause, gated, unexplained and unsure change, note and failed self-check.")
@common_history
@common_workers
@click.option("--scheduler", default=None,
              help="dask.distributed scheduler address for per-rank work (needs dask.distributed: the 'dask' extra).")
@click.option("--html", "html_path", default=None, type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report with plots here (trend sparklines when the "
                   "--history database exists; needs matplotlib: the 'html' extra).")
@click.option("--comment", is_flag=True,
              help="GitHub Actions: post the report as the pull request's sticky comment (created once, then "
                   "updated in place). A failure is a warning and never changes the exit code.")
@click.option("--comment-key", default=None,
              help="Key of the sticky comment (default: the baseline name); give each matrix leg its own. "
                   "1-200 of letters, digits and . _ @ : + / = - (no '--'); anything else is refused (exit 2; "
                   "the composite action replaces it by _). When given, JUnit suite and class names carry it "
                   "too ([KEY]), so merged legs never collide.")
@click.option("--token-env", default="GITHUB_TOKEN", show_default=True,
              help="Environment variable holding the GitHub token (never printed or written).")
@click.option("--no-summary", is_flag=True, help="Do not append the report to $GITHUB_STEP_SUMMARY.")
@allow_partial_opt
def check(baseline_name, capture, policy_path, baseline_dir, trace_mode, no_trace, out, junit, markdown,
          json_path, no_baseline_ok, quiet, history_path, workers, scheduler, comment=False, comment_key=None,
          token_env="GITHUB_TOKEN", no_summary=False, html_path=None, verbose=False, allow_partial=False):
    """Compare CAPTURE against a stored baseline, metric by metric.

    BASELINE is a stored name (baselines/NAME.json) or history:BRANCH (the median of the last
    recorded runs of BRANCH, with a noise band learned from them). Writes JUnit XML, a Markdown
    PR-comment file and a JSON result (also for an invalid capture). Exit code: 0 pass,
    1 regression, 2 usage/policy error, 3 invalid capture, 4 no or incompatible baseline,
    5 a damaged baseline store (DAMAGED_BASELINE) or a history database that cannot be opened
    (STORE_ERROR; the reports are still written for both) or a report write failed, 70 internal error. Several CAPTUREs = repeated runs of
    one commit: step metrics are judged statistically; UNSURE (too few runs) exits 0 unless the
    policy sets statistics.unsure_fails.
    """
    from perfgate.store.reportpaths import remove_stale_check_reports
    # first of all (before the heavy imports below): a run refused for its policy or arguments, or
    # interrupted while it starts, leaves no earlier verdict either (never a capture's file: exit 2)
    remove_stale_check_reports(out, junit=junit, markdown=markdown, json_path=json_path, html_path=html_path,
                               captures=capture, inputs=_inputs(policy_path, history_path, baseline_dir))
    from perfgate.app.gate import CheckReports, check_and_report
    _on_error(lambda e: _verdict_unwritten(e, quiet, verbose, json_path == "-"))
    if comment_key is not None:   # before anything is read or written: the marker must round-trip
        from perfgate.publish.github import require_comment_key
        require_comment_key(comment_key, "--comment-key")
    result, paths = check_and_report(
        _one_or_many(capture), baseline_name, policy=_policy_for_run(policy_path, allow_partial),
        store=_store(baseline_dir),
        reports=CheckReports(out, junit=junit, markdown=markdown, json_path=json_path, html_path=html_path,
                             key=comment_key or baseline_name, junit_key=comment_key),
        history_path=_check_history_path(history_path, baseline_name), no_baseline_ok=no_baseline_ok,
        with_trace=_with_trace(trace_mode, no_trace), workers=workers,
        scheduler=scheduler, progress=_Progress(quiet))
    _OUTCOME["code"] = _OUTCOME["reported"] = result.exit_code   # the reports say it: a later Ctrl-C keeps it
    try:
        if json_path == "-":
            from perfgate.report import render_json
            click.echo(render_json(result), nl=False)
        _print_summary(result, paths, quiet, verbose, err=json_path == "-")
    except BrokenPipeError:  # `perfgate check ... | head -1`: the reader left; the gate goes on
        _stdout_to_devnull()
    _publish_github(result, paths, out, comment, comment_key or baseline_name, token_env, not no_summary,
                    to_stderr=json_path == "-")
    sys.exit(result.exit_code)


@main.command("compare")
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("--base", "bases", multiple=True, type=click.Path(),
              help="A base capture (repeat for repeated runs); then every CAPTURE argument is a candidate.")
@common_policy
@common_trace
@no_trace_opt
@report_files_opt
@click.option("--html", "html_path", default=None, type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report with plots here (needs the 'html' extra).")
@click.option("--quiet", is_flag=True, help="Only the verdict line and report paths.")
@click.option("-v", "--verbose", is_flag=True, help="Every line in full (nothing cut at the right).")
@common_workers
@click.option("--scheduler", default=None,
              help="dask.distributed scheduler address for per-rank work (needs the 'dask' extra).")
@click.option("--no-summary", is_flag=True, help="Do not append the report to $GITHUB_STEP_SUMMARY.")
@allow_partial_opt
def compare_cmd(captures, bases, policy_path, trace_mode, no_trace, out, junit, markdown, json_path, html_path,
                quiet, verbose, workers, scheduler, no_summary, allow_partial):
    """Compare two captures read from disk: `perfgate compare BASE CAND`, or with repeated runs
    `perfgate compare --base B1 --base B2 CAND1 CAND2`. The verdict, exit codes and reports are
    those of `check` with BASE as the baseline; nothing is written to a baseline store or a
    history database. Exit code: 0 pass, 1 regression, 2 usage/policy error, 3 invalid capture
    (either side), 4 incompatible (the base cannot judge the candidate), 5 a report write failed,
    70 internal error.
    """
    from perfgate.store.reportpaths import remove_stale_check_reports
    if not bases:
        if len(captures) != 2:
            raise errors.UsageError(f"perfgate compare takes BASE CAND (two captures), got {len(captures)}; for "
                                    f"repeated runs name each base with --base and give the candidates as arguments")
        bases, captures = captures[:1], captures[1:]
    remove_stale_check_reports(out, junit=junit, markdown=markdown, json_path=json_path, html_path=html_path,
                               captures=[*bases, *captures], inputs={"--policy": policy_path})
    from perfgate.app.gate import CheckReports, compare_and_report
    _on_error(lambda e: _verdict_unwritten(e, quiet, verbose, json_path == "-"))
    result, paths = compare_and_report(
        _one_or_many(bases), _one_or_many(captures), policy=_policy_for_run(policy_path, allow_partial),
        reports=CheckReports(out, junit=junit, markdown=markdown, json_path=json_path, html_path=html_path,
                             key="compare"),
        with_trace=_with_trace(trace_mode, no_trace), workers=workers, scheduler=scheduler, progress=_Progress(quiet))
    _OUTCOME["code"] = _OUTCOME["reported"] = result.exit_code
    try:
        if json_path == "-":
            from perfgate.report import render_json
            click.echo(render_json(result), nl=False)
        _print_summary(result, paths, quiet, verbose, err=json_path == "-")
    except BrokenPipeError:
        _stdout_to_devnull()
    _publish_github(result, paths, out, False, "compare", "GITHUB_TOKEN", not no_summary, to_stderr=json_path == "-")
    sys.exit(result.exit_code)


def _verdict_unwritten(e, quiet, verbose, err):
    """``check`` whose reports could not be written (a full disk: StoreError, exit 5): the verdict
    reached (``e.result``) is still printed, its first line saying the reports were not written
    and the process exits 5 (a "PASS (exit 0)" line followed by a store error would contradict the
    exit code), then the store error."""
    result = getattr(e, "result", None)
    if result is None:
        return
    from perfgate.report.summary import console_lines
    lines = console_lines(result, verbose=verbose, quiet=quiet)
    lines[0] = lines[0].replace(f"(exit {result.exit_code})",
                                f"(reports not written: exit {errors.EXIT_STORE}, not {result.exit_code})", 1)
    for line in lines:
        click.echo(line, err=err)


def _publish_github(result, paths, out, comment, key, token_env, summary, to_stderr=False):
    """Job summary, sticky PR comment and step outputs (GitHub Actions); warnings only.
    ``to_stderr``: the lines saying what was posted go to stderr (``check --json -``: stdout
    holds the JSON document alone)."""
    import os
    if not (comment or os.environ.get("GITHUB_STEP_SUMMARY") or os.environ.get("GITHUB_OUTPUT")):
        return
    from perfgate.publish.github import publish_check
    from perfgate.report import render_markdown
    res = publish_check(result, paths, markdown=render_markdown(result, key=key), comment=comment, key=key,
                        out_dir=out, token_env=token_env, summary=summary)
    c = res["comment"]
    if c is not None and c.action in ("created", "updated"):
        click.echo(f"  comment {c.action}: {c.url}" + (" (truncated to GitHub's limit)" if c.truncated else "")
                   + (f" ({c.foreign} comment(s) with the marker by someone else left untouched)" if c.foreign else ""),
                   err=to_stderr)
    if res["summary"]:
        click.echo(f"  job summary: appended to {res['summary']}", err=to_stderr)
    for w in res["warnings"]:
        if os.environ.get("GITHUB_ACTIONS"):  # a workflow command: one line, % and newlines escaped
            w = "::warning title=perfgate::" + w.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        else:
            w = f"perfgate: warning: {w}"
        click.echo(w, err=True)


def _check_history_path(path, baseline_name: str):
    """``check``'s history path: never refused before the check runs, so that a database that
    cannot be opened is a STORE_ERROR result with its reports written (exit 5), as for the
    default path (``--history DIR`` must not exit 5 with no report). With a
    ``history:BRANCH`` baseline the check itself refuses it; with a file baseline the history
    only feeds the HTML trend sparklines, and a path that cannot be a database is a warning."""
    import os
    from perfgate.errors import StoreError
    given = path or os.environ.get("PERFGATE_HISTORY")
    if not given:
        return Path("perfgate-history.sqlite")
    if not str(baseline_name).startswith("history:"):
        try:
            _history_path(given)
        except StoreError as e:
            click.echo(f"perfgate: warning: {e}: not used, the HTML trend sparklines are left out",
                       err=True)
    return Path(given)


def _history_path(path, *, only_if_given=False):
    """--db / --history, else $PERFGATE_HISTORY, else ./perfgate-history.sqlite; a directory is
    refused the same way for every spelling (StoreError, exit 5). ``only_if_given``: commands
    that use the history only on request (check, report) refuse a directory only when the user
    named the path; the default path is then checked where it is used (history:BRANCH)."""
    import os
    from perfgate.history.store import require_db_path
    given = path or os.environ.get("PERFGATE_HISTORY")  # empty = unset
    if only_if_given and not given:
        return Path("perfgate-history.sqlite")
    return require_db_path(given or "perfgate-history.sqlite")


@main.group(cls=_Group)
def history():
    """Record runs into the trend history and query it (SQLite)."""


@history.command("record")
@click.argument("capture", type=click.Path())
@click.option("--branch", required=True, callback=_branch_name, help="Branch the run belongs to, e.g. main.")
@click.option("--commit", default=None, help="Commit SHA (default: from CI env or git).")
@click.option("--note", default=None, callback=_utf8_text, help="Tuning-journal note, e.g. 'BLOCK_SIZE_KV 128->64'.")
@click.option("--status", type=click.Choice(["kept", "reverted"]), default="kept", show_default=True,
              help="Tuning journal: whether the change this run tried was kept or reverted.")
@click.option("--allow-duplicate", is_flag=True,
              help="Record even when the branch already holds a run with identical metric values.")
@click.option("--force", is_flag=True, help="Record from a merge-queue (merge_group) run anyway.")
@common_history
@common_policy
@common_trace
@no_trace_opt
@common_workers
def history_record(capture, branch, commit, note, status, allow_duplicate, history_path, policy_path, trace_mode,
                   no_trace, workers, force=False):
    """Fingerprint CAPTURE and record it (one transaction; invalid captures record no values).

    Idempotent: the same capture recorded again on a branch writes nothing (a warning names the
    existing run) unless --allow-duplicate is given. While another process holds the database's
    lock a line on stderr says so at each retry; after 60 s in all (PERFGATE_HISTORY_LOCK_WAIT=SECONDS
    to change) nothing is recorded, exit 5."""
    _interrupt_leaves("nothing recorded: the history database is as it was")   # before the slow imports
    from perfgate.app.gate import HistoryEntry, record_history
    from perfgate.ingest.discover import refuse_outputs_among_inputs
    refuse_outputs_among_inputs(capture, {"--db": _history_path(history_path)})   # never a capture's profiler .db
    run_id, fp, dup = record_history(capture, HistoryEntry(branch, commit=commit, note=note, status=status),
                                     policy=_policy(policy_path), history_path=_history_path(history_path),
                                     with_trace=_with_trace(trace_mode, no_trace), allow_duplicate=allow_duplicate,
                                     force=force, on_wait=lambda line: click.echo(f"perfgate: {line}", err=True),
                                     workers=workers)
    if dup:
        click.echo(f"warning: this capture is already recorded on branch {branch!r} as run {run_id} (identical "
                   f"metric values); nothing written (--allow-duplicate records it again)", err=True)
        return
    click.echo(f"recorded run {run_id} ({len(fp.metrics)} metrics) on branch {branch!r} -> {_history_path(history_path)}")
    for w in fp.warnings[:10]:   # as baseline save says them: a missing step row, mismatched steps, ...
        click.echo(f"  warning: {w}")
    if len(fp.warnings) > 10:
        click.echo(f"  ... and {len(fp.warnings) - 10} more warning(s) (in the recorded fingerprint)")


def _open_history(history_path):
    from perfgate.history.store import HistoryStore
    return HistoryStore(_history_path(history_path), readonly=True)


def _order_warnings(hs):
    """Say on stderr which commits are ordered by when they were recorded (a wrong clock)."""
    for line in hs.order_warnings():
        click.echo(f"warning: {line}", err=True)


def _emit(df, fmt):
    # a text cell the database holds as bytes that are not UTF-8 (a note written by another tool)
    # is shown with its bad bytes escaped: the JSON writer would stop at it (exit 70)
    for c in df.columns[df.dtypes == object]:
        if df[c].map(lambda v: isinstance(v, bytes)).any():
            df = df.assign(**{c: df[c].map(lambda v: v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v)})
    if fmt == "json":
        click.echo(df.to_json(orient="records", indent=1))
    elif fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    else:   # a table for people: an absent note or version reads "-", not "None" / "NaN"
        click.echo(df.astype(object).where(df.notna(), "-").to_string(index=False) if len(df) else "(no rows)")


@history.command("runs")
@click.option("--branch", default=None, callback=_branch_name, help="Only runs of this branch (default: every branch).")
@click.option("--since", default=None, help="e.g. 30d, 12h, 2w or an ISO date")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", help="Output format.")
@common_history
def history_runs(branch, since, fmt, history_path):
    """List recorded runs, oldest commit first (ancestry in this checkout, else stored commit times)."""
    hs = _open_history(history_path)
    runs = hs.runs(branch=branch, since=since)
    _order_warnings(hs)
    if fmt == "table":  # JSON / CSV keep null / empty for a run without a commit
        from perfgate.history.store import NO_COMMIT
        runs["commit"] = runs["commit"].map(lambda c: c or NO_COMMIT)
    _emit(runs, fmt)


@history.command("query")
@click.option("--metric", required=True, help="Metric key, e.g. 'step.time_us{view=p50}'.")
@click.option("--branch", default=None, callback=_branch_name, help="Only runs of this branch (default: every branch).")
@click.option("--since", default=None, help="e.g. 30d, 12h, 2w or an ISO date")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", help="Output format.")
@common_history
def history_query(metric, branch, since, fmt, history_path):
    """One metric's recorded values over time."""
    from perfgate.history.trend import require_metric
    hs = _open_history(history_path)
    df = hs.series(metric, branch=branch, since=since)
    if df.empty:
        require_metric(hs, metric)
    _order_warnings(hs)
    _emit(_with_unit_columns(df, metric), fmt)


def _with_unit_columns(df, metric: str):
    """``df`` (a history series) with ``unit`` and ``caliber`` columns after ``value``, from the
    registry: a bare ``value`` says neither what it measures nor in which unit."""
    from perfgate.report.history import unit_and_caliber
    got = unit_and_caliber(metric)
    if got is None:
        return df
    df = df.copy()
    at = list(df.columns).index("value") + 1 if "value" in df.columns else len(df.columns)
    df.insert(at, "unit", got[0])
    df.insert(at + 1, "caliber", got[1])
    return df


@history.command("trend")
@click.option("--metric", default=None, help="Metric key (default: every gated metric).")
@click.option("--branch", default=None, callback=_branch_name, help="Only runs of this branch (default: every branch).")
@common_history
@common_policy
def history_trend(metric, branch, history_path, policy_path):
    """Change points (ruptures PELT + Mann-Whitney U) per metric, with the commit where each starts."""
    from perfgate.history.trend import trend_report
    from perfgate.report.history import render_trend
    policy = _policy(policy_path)
    hs = _open_history(history_path)
    rep = trend_report(hs, policy, metric, branch)
    _order_warnings(hs)
    for t, note in zip(rep.trends, rep.notes["per_series"]):
        if metric or t.change_points:
            click.echo(render_trend(t.key + (f" (series {t.series_key})" if t.series_key else ""), t.series,
                                    t.change_points, note=note))
    if metric and not rep.trends:
        click.echo(f"no kept run records {metric!r}" + (f" on branch {branch!r}" if branch else ""))
    if not metric:
        click.echo(f"{rep.change_point_count} change point(s) over {len(rep.keys)} gated metric(s)")
        for line in rep.notes["summary"]:
            click.echo(line)


@history.command("report")
@click.option("--branch", default=None, callback=_branch_name, help="Only runs of this branch (default: every branch).")
@click.option("--last", "last_n", default=10, show_default=True, type=click.IntRange(1, 100000),
              help="Report metrics whose change point is among the last N runs.")
@click.option("--out", default="perfgate-history-report", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the report (Markdown and PNG plots).")
@common_history
@common_policy
def history_report(branch, last_n, out, history_path, policy_path):
    """Nightly summary: gated metrics that changed in the last N runs, with PNG plots."""
    from perfgate.report.writers import remove_stale_history_report, write_history_report
    remove_stale_history_report(out)   # no earlier report may outlive a refused run
    policy = _policy(policy_path)
    hs = _open_history(history_path)
    n, path = write_history_report(hs, policy, out, branch=branch, last_n=last_n)
    _order_warnings(hs)
    click.echo(f"{n} metric(s) changed in the last {last_n} run(s); report: {path}")


@history.command("site")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--branch", default=None, callback=_branch_name, help="Only runs of this branch (default: every branch).")
@click.option("--repo-url", default=None,
              help="Repository URL that commits link into (<URL>/commit/<SHA>), e.g. https://github.com/OWNER/REPO "
                   "(default: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY; no links when neither is known).")
@common_history
@common_policy
def history_site(out, branch, repo_url, history_path, policy_path):
    """Static site in OUT: index.html (every gated metric's series, its latest change point) and
    one page per series with an interactive chart (commits on x, change points marked, each point
    linked to its commit). Self-contained HTML: nothing is loaded from the network."""
    import os
    from perfgate.report.history_site import remove_stale_site, repo_url_from, write_history_site
    url = repo_url_from(repo_url, os.environ)
    remove_stale_site(out)   # no earlier site may outlive a refused run
    policy = _policy(policy_path)
    hs = _open_history(history_path)
    n, path = write_history_site(hs, policy, out, branch=branch, repo_url=url)
    _order_warnings(hs)
    click.echo(f"{n} series page(s); site: {path}" + ("" if url else " (no repository URL: commits not linked)"))


@history.command("journal")
@click.option("--branch", required=True, callback=_branch_name, help="Branch whose tuning rounds are listed.")
@click.option("--metric", default=None, help="Key metric (default: policy history.key_metric).")
@common_history
@common_policy
def history_journal(branch, metric, history_path, policy_path):
    """The tuning journal: rounds, changes, key metric, delta vs previous kept and vs first."""
    from perfgate.report.history import branch_journal, render_journal
    policy = _policy(policy_path)  # loaded (and checked) also when --metric is given
    key = metric or policy.history["key_metric"]
    hs = _open_history(history_path)
    table = branch_journal(hs, branch, key)
    _order_warnings(hs)
    if table.empty:  # as `history runs --branch X` of an unknown branch: empty, exit 0
        click.echo(f"no run recorded on branch {branch!r}", err=True)
    click.echo(render_journal(table, key), nl=False)


@main.command()
@click.argument("capture", type=click.Path())
@common_policy
@common_trace
@no_trace_opt
@click.option("--output", "-o", default=None, type=click.Path(dir_okay=False),
              help="Write the fingerprint JSON here instead of stdout ('-' is stdout). An earlier FILE is "
                   "removed before the capture is read (through a link: its target), so a refused capture "
                   "(exit 3), an error or a killed run leaves no earlier fingerprint looking current; a "
                   "failed self-check still writes this run's fingerprint (exit 3).")
@common_workers
@click.option("--scheduler", default=None, help="dask.distributed scheduler address (tcp://HOST:PORT): "
                                                 "per-rank work runs on that cluster (needs pip install "
                                                 "'perfgate[dask]').")
def fingerprint(capture, policy_path, trace_mode, no_trace, output, workers, scheduler):
    """Print the fingerprint of CAPTURE (metrics, self-checks, provenance) as JSON.
    With --output FILE, the profiler's collection options (with_stack, record_shapes, ...; in the
    JSON under config.collection) are also printed on stderr in one line. Exits 3 when a
    self-check fails."""
    from perfgate.app.run import fingerprint_path
    from perfgate.metrics.fingerprint import failed_checks
    from perfgate.app.gate import require_writable
    from perfgate.ingest.discover import refuse_outputs_among_inputs
    from perfgate.store.reportpaths import refuse_outputs_on_inputs
    refuse_outputs_among_inputs(capture, {"--output": output})
    refuse_outputs_on_inputs({"--output": output}, _inputs(policy_path, history=False, store=False))
    require_writable("--output", output)
    if output and output != "-":
        from perfgate.store.atomic import discard_stale
        discard_stale(output)   # no earlier fingerprint may outlive a refused run
    fp = fingerprint_path(capture, _policy(policy_path), with_trace=_with_trace(trace_mode, no_trace), workers=workers,
                          scheduler=scheduler, progress=_Progress(output in (None, "-")))
    from perfgate.jsonout import dumps
    text = dumps(fp.to_dict())  # orjson where exact: a 1M-row fingerprint's ~30 MB in ~0.2 s, not ~2 s
    if failed_checks(fp):
        _OUTCOME["code"] = errors.EXIT_INVALID_CAPTURE
    if output and output != "-":   # "-" is stdout, as check's --json -
        from perfgate.store.atomic import write_atomic
        from perfgate.metrics.collection import summary_text
        write_atomic(Path(output), text)
        click.echo(f"perfgate: {summary_text(fp.config)}", err=True)   # stdout holds no JSON here
    else:
        click.echo(text.decode("utf-8"), nl=False)
    bad = failed_checks(fp)
    if bad:
        for c in bad[:5]:
            click.echo(f"perfgate: invalid capture: self-check {c.name} failed on rank {c.rank}{'' if c.step is None else f' step {c.step}'}: "
                       f"{c.message}", err=True)
        sys.exit(errors.EXIT_INVALID_CAPTURE)


@main.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--ranks", default=2, show_default=True, type=click.IntRange(1, 4096), help="Ranks to write.")
@click.option("--steps", default=3, show_default=True, type=click.IntRange(1, 100000), help="Profiler steps per rank.")
@click.option("--seed", default=0, show_default=True, type=int, help="Random seed (same seed, same capture).")
@click.option("--header", default="g2025_l1", show_default=True, help="kernel_details.csv header generation to write.",
              type=click.Choice(["g2025_l1", "g2025_l0", "g2023", "g83"]))
@click.option("--extra-calls", multiple=True, metavar="FAMILY=FACTOR",
              help="Multiply a kernel family's calls per step (inject a count regression).")
@click.option("--slowdown", multiple=True, metavar="FAMILY=FACTOR",
              help="Multiply a kernel family's durations (inject a time regression).")
@click.option("--overwrite", is_flag=True,
              help="Replace an earlier capture in OUT wholesale (OUT may hold only rank folders, *_ascend_pt/).")
def synth(out, ranks, steps, seed, header, extra_calls, slowdown, overwrite):
    """Write a synthetic, self-consistent capture to OUT, a new or empty folder (created if missing).

    A folder that already holds files is refused (exit 2), so the rank folders of an earlier
    capture never end up beside the new ones; --overwrite replaces an earlier capture instead.
    The capture is written to a hidden scratch folder first and moved into place once complete:
    a failure leaves OUT as it was."""
    from perfgate.synth import SynthSpec, write_capture
    from perfgate.synth.writer import DEFAULT_FAMILIES
    known = {f[0] for f in DEFAULT_FAMILIES}
    spec = SynthSpec(ranks=ranks, steps=steps, seed=seed, header=header,
                     extra_calls=_kv(extra_calls, "--extra-calls", known),
                     slowdown=_kv(slowdown, "--slowdown", known))
    write_capture(out, spec, existing="replace" if overwrite else "refuse")
    click.echo(f"wrote {ranks} rank(s) x {steps} step(s) to {out}")


@main.command()
@click.option("--out", default="perfgate-demo", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the captures, baseline and reports.")
def demo(out):
    """Run the gate on the bundled synthetic pair (baseline vs a candidate with an injected
    regression). Exits 1, because the candidate regresses.

    Running it again replaces the earlier demo in --out: its two captures wholesale (a capture
    folder holding more than rank folders is refused, exit 2), its 'main' baseline and reports."""
    from perfgate.app.gate import run_demo
    base, cand, path, result, paths = run_demo(out, policy=_policy(None))
    # the commands it ran, as they can be pasted (its own baseline folder and report folder)
    q = shlex.quote
    bl = q(str(Path(out) / "baselines"))
    click.echo(f"$ perfgate baseline save --name main --baseline-dir {bl} --force {q(str(base))}\n"
               f"saved baseline 'main' -> {path}\n")
    click.echo(f"$ perfgate check --baseline main --baseline-dir {bl} --out {q(str(Path(out) / 'report'))} "
               f"{q(str(cand))}")
    _print_summary(result, paths, False)
    sys.exit(result.exit_code)


@main.command("report")
@click.argument("capture", type=click.Path())
@click.option("--html", "html_path", default="perfgate-report.html", show_default=True,
              type=click.Path(dir_okay=False),
              help="HTML file to write (an earlier one is removed before the capture is read).")
@common_history
@common_policy
@common_trace
@no_trace_opt
@common_workers
def report_capture(capture, html_path, history_path, policy_path, trace_mode, no_trace, workers):
    """Write a self-contained HTML report (plots, self-checks, provenance) for one CAPTURE.
    Exits 3 when a self-check fails or a fail-closed finding is present (the report says why), or
    when the capture cannot be read (a page stating the error is still written where the capture
    path exists; for a path that does not exist, no page)."""
    from perfgate.app.gate import capture_report, require_writable
    if html_path == "-":   # a page is a file: "-" would be a file of that name in the working folder
        raise errors.UsageError("--html needs a file path: the page is not written to stdout")
    from perfgate.store.reportpaths import refuse_outputs_on_inputs
    refuse_outputs_on_inputs({"--html": html_path}, _inputs(policy_path, history_path, store=False))
    policy = _policy(policy_path)
    require_writable("--html", html_path)
    _on_error(lambda e: _report_read_error(e, capture, html_path))
    rep = capture_report(capture, html_path, policy=policy, history_path=_history_path(history_path, only_if_given=True),
                         with_trace=_with_trace(trace_mode, no_trace), workers=workers, progress=_Progress(False))
    fp = rep.fingerprint
    if rep.problems:   # the cause first, as check says it: a metric count would read as a usable capture
        first = rep.problems[0]
        if hasattr(first, "status"):
            why = (f"self-check {first.name} failed on rank {first.rank}"
                   f"{'' if first.step is None else f' step {first.step}'}: {first.message}")
        else:
            why = f"{first.code} on rank {first.rank}: {first.message}"
        more = f" (and {len(rep.problems) - 1} more problem(s): the page lists them)" if len(rep.problems) > 1 else ""
        click.echo(f"perfgate: INVALID_CAPTURE: {why}{more}\n  html: {rep.path}")
        sys.exit(errors.EXIT_INVALID_CAPTURE)
    click.echo(f"perfgate: VALID_CAPTURE: {len(fp.metrics)} metrics, ranks {fp.provenance['ranks']}\n  html: {rep.path}")


def _report_read_error(e, capture, html_path):
    """``perfgate report`` on a capture that failed while reading (an InvalidCaptureError):
    write the page saying why (atomic); the error is then reported and exits 3 as for any
    invalid capture (also when the page cannot be written). A CAPTURE path that does not exist
    (a typo, or no capture at all) gets no page: exit 3 and the message only."""
    import os.path
    if not isinstance(e, errors.InvalidCaptureError) or not os.path.exists(capture):   # never raises
        return
    from perfgate.report.writers import write_capture_error_html
    try:
        path = write_capture_error_html(e, html_path, source=capture)
        click.echo(f"perfgate: INVALID_CAPTURE: the capture could not be read\n  html: {path}")
    except PerfgateError as w:
        click.echo(f"perfgate: the report page could not be written: {w.render()}", err=True)


@main.command("comment")
@click.argument("body_file", type=click.Path(dir_okay=False, exists=True))
@click.option("--key", default=None, help="Sticky-comment key (default: the marker that starts BODY_FILE).")
@click.option("--repo", default=None, help="OWNER/NAME (default: $GITHUB_REPOSITORY; never taken from --meta, "
                                            "which is refused when it names another repository).")
@click.option("--pr", "pr_number", default=None, type=click.IntRange(1), help="Pull request number "
              "(default: from --meta, else $GITHUB_EVENT_PATH).")
@click.option("--meta", default=None, type=click.Path(dir_okay=False, exists=True),
              help="perfgate-comment.json left by a check whose comment failed (PR number, key, head commit). "
                   "Untrusted: it never sets the API URL or the repository.")
@click.option("--head-sha", default=None, help="The commit the pull request must have as its head (a workflow_run "
                                                "job: github.event.workflow_run.head_sha): else nothing is posted "
                                                "(exit 2).")
@click.option("--api-url", default=None, help="REST API root (default: $GITHUB_API_URL or https://api.github.com).")
@click.option("--token-env", default="GITHUB_TOKEN", show_default=True,
              help="Environment variable holding the GitHub token (never printed or written).")
def comment_cmd(body_file, key, repo, pr_number, meta, head_sha, api_url, token_env):
    """Post BODY_FILE (a perfgate Markdown report) as the pull request's sticky comment: the
    comment with the same key is updated in place, else one is created. For a follow-up
    workflow_run job after a fork PR. Exit 0 posted, 2 usage error, 5 posting failed."""
    import os
    from perfgate.publish.github import post_comment_file, require_comment_key
    if key is not None:
        require_comment_key(key, "--key")
    out = post_comment_file(body_file, key=key, repository=repo, pr_number=pr_number, meta=meta, api_url=api_url,
                            head_sha=head_sha, token=os.environ.get(token_env), token_name=token_env)
    click.echo(f"comment {out.action}: {out.url}" + (" (truncated to GitHub's limit)" if out.truncated else ""))


@main.command("github-context")
def github_context():
    """Print the GitHub Actions context perfgate sees as JSON: repository, event, PR number,
    head / base SHA, fork or not, the PR's merge-base (git merge-base, needs the history:
    actions/checkout with fetch-depth: 0) and the API URL. Never the token. With $GITHUB_OUTPUT
    set, also writes the step outputs pr-number, head-sha, base-sha, merge-base, is-fork."""
    import os
    from perfgate.publish.github import context_from_env, write_outputs
    problems: list[str] = []
    d = context_from_env(problems=problems).to_dict()
    for w in problems:
        click.echo(f"perfgate: warning: {w}", err=True)
    if os.environ.get("GITHUB_OUTPUT"):
        write_outputs(os.environ["GITHUB_OUTPUT"], {
            "pr-number": d["pr_number"], "head-sha": d["head_sha"], "base-sha": d["base_sha"],
            "merge-base": d["merge_base"], "is-fork": str(d["is_fork"]).lower()})
    click.echo(json.dumps(d, indent=1))


@main.command()
@click.argument("roots", nargs=-1, required=True, type=click.Path())
@common_policy
@click.option("--out", default="perfgate-sweep", show_default=True, type=click.Path(file_okay=False),
              help="Folder for sweep.csv and sweep.xlsx.")
@click.option("--cache", "cache_dir", default=None, type=click.Path(file_okay=False),
              help="Cache folder for per-capture results (default: OUT/.cache).")
@click.option("--no-cache", is_flag=True, help="Recompute every capture.")
@common_workers
def sweep(roots, policy_path, out, cache_dir, no_cache, workers):
    """Fingerprint every capture under ROOTS and write a rollup (one row per capture, failed
    ones with their reason) as OUT/sweep.csv and OUT/sweep.xlsx (the xlsx with the xlsx extra
    only; a warning without it); JSON summary on stdout, progress on stderr. Exits 0 when the
    rollup was written, whatever the captures."""
    from perfgate.app.sweep import run_sweep, summary, write_rollup
    bar = {}

    def progress(done, total, cap):
        if not sys.stderr.isatty():  # CI logs: one plain line per capture instead of a live bar
            click.echo(f"perfgate sweep: [{done}/{total}] {cap}", err=True)
            return
        if not bar:
            from rich.console import Console
            from rich.progress import Progress
            bar["p"] = Progress(console=Console(stderr=True), transient=True)
            bar["p"].start()
            bar["t"] = bar["p"].add_task("sweeping captures", total=total)
        bar["p"].update(bar["t"], completed=done, description=f"{Path(cap).name}")

    from perfgate.ingest.discover import refuse_outputs_among_inputs
    from perfgate.store.atomic import discard_stale
    refuse_outputs_among_inputs(roots, {"--out": out, "--cache": cache_dir})
    for name in ("sweep.csv", "sweep.xlsx"):   # no earlier rollup may outlive a refused or killed sweep
        discard_stale(Path(out) / name)
    try:
        table = run_sweep(roots, _policy(policy_path), workers=workers, progress=progress,
                          cache_dir=None if no_cache else (cache_dir or Path(out) / ".cache"))
        files = write_rollup(table, out)
    finally:
        if bar:
            bar["p"].stop()
    if "xlsx" not in files:
        click.echo("perfgate: warning: sweep.xlsx not written: it needs openpyxl, an optional part of perfgate "
                   "(pip install openpyxl: the 'xlsx' extra); sweep.csv holds the same rollup", err=True)
    click.echo(json.dumps(summary(table, files), indent=1, ensure_ascii=False))


@main.command()
@click.argument("capture", type=click.Path())
@click.option("--text", "as_text", is_flag=True, help="Print the hierarchy as text instead of JSON.")
@common_policy
@common_trace
@no_trace_opt
def structure(capture, as_text, policy_path, trace_mode, no_trace):
    """Print the model structure of CAPTURE (step -> micro-batch -> pass -> layer -> block, the
    named non-layer segments, layer / block classes, fusion candidates) as JSON, or as text
    with --text (fusion candidates are informational: no claim about gains)."""
    from perfgate.app.run import structure_report, structure_text
    rep = structure_report(capture, _policy(policy_path), with_trace=_with_trace(trace_mode, no_trace))
    click.echo(structure_text(rep) if as_text else json.dumps(rep, indent=1, ensure_ascii=False, default=str),
               nl=not as_text)


def _one_or_many(captures):
    """One CAPTURE argument -> its path; several -> the list (repeated captures)."""
    return captures[0] if len(captures) == 1 else list(captures)


@main.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_path", default="policies/calibrated.yaml", show_default=True,
              type=click.Path(dir_okay=False), help="Policy file to write.")
@click.option("--k", default=3.0, show_default=True, type=float, help="Tolerance = k x robust sigma.")
@common_policy
@common_trace
@no_trace_opt
@common_workers
def calibrate(captures, out_path, k, policy_path, trace_mode, no_trace, workers):
    """Learn tolerances from CAPTURES (>= 3 repeated runs of one commit): per gated step /
    share metric the run-to-run noise (1.4826 x MAD of per-capture values) x k. Writes a
    policy file with them and says which tolerances could be tightened."""
    from perfgate.app.gate import calibrate as run_calibrate
    from perfgate.ingest.discover import refuse_outputs_among_inputs
    from perfgate.store.reportpaths import refuse_outputs_on_inputs
    refuse_outputs_among_inputs(captures, {"--out": out_path})
    refuse_outputs_on_inputs({"--out": out_path}, _inputs(policy_path, history=False, store=False))
    proposals, path = run_calibrate(list(captures), out_path, policy=_policy(policy_path), k=k,
                                    with_trace=_with_trace(trace_mode, no_trace), workers=workers)

    from perfgate.compare.calibrate import render_table
    for line in render_table(proposals, len(captures), k, path):
        click.echo(line)


if __name__ == "__main__":  # pragma: no cover
    main()
