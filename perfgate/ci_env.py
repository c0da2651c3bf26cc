"""Where a run happens: provenance (commit, branch, runner, CI run id) from the CI environment
or ``git``, the GitHub event names that mean "a pull request" (never a trusted branch) or "a
merge queue" (unmerged code), and the commit facts history ordering needs (commit time, first
parent)."""
from __future__ import annotations

import os
import platform
import subprocess

PR_EVENTS = ("pull_request", "pull_request_target")
#: merge-queue runs test a temporary merge of unmerged pull requests (ref gh-readonly-queue/...):
#: they never write the main branch's baseline or history unless forced
MERGE_QUEUE_EVENTS = ("merge_group",)


def refuse_untrusted_write(env, what: str, kind: str, force: bool = False) -> str | None:
    """Why ``what`` (e.g. "baseline 'main'") must not be written from this CI event, or None.

    Pull-request events are always refused; merge-queue events (``merge_group``) unless
    ``force``. ``kind`` names what such runs never write ("baselines", "to the history").
    Returns the reason as one sentence (the caller raises its UsageError, exit 2)."""
    event = env.get("GITHUB_EVENT_NAME")
    if event in PR_EVENTS:
        return f"refusing to write {what} from a {event} run: pull-request runs never write {kind}"
    if event in MERGE_QUEUE_EVENTS and not force:
        return (f"refusing to write {what} from a {event} run: merge-queue runs test code that is not merged yet "
                f"and never write {kind} (pass --force to write anyway)")
    return None


def commit_facts(commit: str, cwd=None) -> dict:
    """``{"commit_time": ISO 8601 committer time, "commit_parent": first parent SHA}`` of
    ``commit`` from ``git`` in ``cwd`` (``git show -s --format=%cI %P``); ``{}`` when git or the
    commit is not there. A root commit has no ``commit_parent``."""
    try:
        r = subprocess.run(["git", "show", "-s", "--format=%cI %P", commit, "--"], cwd=cwd, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    parts = r.stdout.split() if r.returncode == 0 else []
    if not parts:
        return {}
    out = {"commit_time": parts[0]}
    if len(parts) > 1:
        out["commit_parent"] = parts[1]
    return out


def gather_provenance(env=None, cwd=None) -> dict:
    """Commit, branch, runner and CI run id from the CI environment (GitHub Actions names),
    falling back to ``git`` in ``cwd`` and the host name. Values that are unknown are omitted.
    ``commit_source`` says where the commit came from (``GITHUB_SHA``, ``CI_COMMIT_SHA``, or
    ``git HEAD of <folder>``: the working folder's repository, which is the code under test in
    CI, not necessarily the capture's)."""
    env = os.environ if env is None else env
    out = {}
    commit = env.get("GITHUB_SHA") or env.get("CI_COMMIT_SHA")
    source = "GITHUB_SHA" if env.get("GITHUB_SHA") else "CI_COMMIT_SHA" if commit else None
    branch = env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME") or env.get("CI_COMMIT_REF_NAME")
    if not commit or not branch:
        for args, key in ((["rev-parse", "HEAD"], "commit"),
                          (["rev-parse", "--abbrev-ref", "HEAD"], "branch")):
            if (key == "commit" and commit) or (key == "branch" and branch):
                continue
            try:
                r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)
                if r.returncode == 0 and r.stdout.strip():
                    if key == "commit":
                        commit = r.stdout.strip()
                        source = f"git HEAD of {os.path.abspath(cwd or os.getcwd())}"
                    else:
                        branch = r.stdout.strip()
            except (OSError, subprocess.SubprocessError):
                pass
    if commit:
        out["commit"] = commit
        out["commit_source"] = source
    if branch:
        out["branch"] = branch
    out["runner"] = env.get("RUNNER_NAME") or platform.node()
    if env.get("GITHUB_RUN_ID"):
        out["ci_run_id"] = env["GITHUB_RUN_ID"]
    return out
