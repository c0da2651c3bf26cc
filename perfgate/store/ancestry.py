"""Whether a baseline save would put an older commit in place of a newer one.

Two pushes to main start two jobs; when the older push's job (commit A) finishes after the newer
one's (commit B, a descendant of A), ``baseline save`` of A would replace B's baseline and the
pull requests after B would be gated against A's performance. :func:`refuse_older_commit` asks
git (``git merge-base --is-ancestor``) in the working folder, the checkout under test, as
:func:`perfgate.ci_env.gather_provenance` reads the commit there.

What git can tell, and what follows:

* the new commit is a proper ancestor of the stored one: refused (exit 2) naming both commits,
  unless ``--force``;
* it is not (a descendant, the same commit, a sibling after a rewritten history): the save goes
  ahead;
* the stored commit is not in the local history (the job checked out before the newer push):
  fetched once from ``origin`` (``git fetch --depth=1`` of that commit would cut the graph, so the
  whole history is asked for only when the repository is not shallow), then asked again;
* git cannot tell (no git, not a repository, a shallow clone, either commit unknown or not
  fetchable): the save goes ahead with a warning naming both commits and the cause: a guard
  that fails closed there would stop every default ``actions/checkout`` (fetch-depth 1) job and
  teach ``--force`` everywhere. ``fetch-depth: 0`` lets the guard decide.
"""
from __future__ import annotations

import subprocess

from perfgate.errors import UsageError

_GIT_TIMEOUT = 30


def _git(args, cwd) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_GIT_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None


def _known(commit: str, cwd) -> bool:
    r = _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd)
    return r is not None and r.returncode == 0


def _why_unknown(new: str, old: str, cwd) -> str | None:
    """Why git in ``cwd`` cannot answer for these two commits (None: it can). Fetches a stored
    commit missing from a full clone once from ``origin``."""
    r = _git(["rev-parse", "--is-shallow-repository"], cwd)
    if r is None:
        return "git is not available"
    if r.returncode != 0:
        return "the working folder is not a git repository"
    if r.stdout.strip() == "true":
        return "the checkout is shallow (actions/checkout with fetch-depth: 0 keeps the history)"
    if not _known(new, cwd):
        return f"commit {new} is not in the local history"
    if not _known(old, cwd):
        _git(["fetch", "--quiet", "--no-tags", "origin", old], cwd)
        if not _known(old, cwd):
            return f"commit {old} is not in the local history and could not be fetched from origin"
    return None


def refuse_older_commit(name: str, old_commit: str | None, new_commit: str | None, *, cwd=None) -> str | None:
    """Refuse to replace baseline ``name``, saved at ``old_commit``, with one of ``new_commit``
    when ``new_commit`` is a proper ancestor of ``old_commit``.

    Returns None when the save may go ahead and git decided it (or a commit is unrecorded, or
    both are the same), or a warning sentence when git cannot tell (the save goes ahead).

    Raises:
        UsageError: ``new_commit`` is an ancestor of ``old_commit`` (exit 2); the message names
            both commits and ``--force``.
    """
    if not old_commit or not new_commit or old_commit == new_commit:
        return None
    why = _why_unknown(new_commit, old_commit, cwd)
    if why is not None:
        return (f"baseline {name!r} was saved at commit {old_commit}; whether {new_commit} is older (its "
                f"ancestor) cannot be told: {why}; replaced")
    new_sha, old_sha = (_git(["rev-parse", f"{c}^{{commit}}"], cwd).stdout.strip() for c in (new_commit, old_commit))
    if new_sha == old_sha:   # one commit, named two ways (a ref name, a short SHA)
        return None
    r = _git(["merge-base", "--is-ancestor", new_sha, old_sha], cwd)
    if r is not None and r.returncode == 0:
        raise UsageError(f"baseline {name!r} was saved at commit {old_commit}, a descendant of this capture's "
                         f"commit {new_commit}: refusing to replace it with an older commit's baseline (two "
                         f"jobs finished out of order)",
                         hint="use --force to replace it on purpose (e.g. after reverting main)")
    return None
