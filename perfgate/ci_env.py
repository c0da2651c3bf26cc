"""Where a run happens: provenance (commit, branch, runner, CI run id) from the CI environment
or ``git``, and the GitHub event names that mean "a pull request" (never a trusted branch)."""
from __future__ import annotations

import os
import platform
import subprocess

PR_EVENTS = ("pull_request", "pull_request_target")


def gather_provenance(env=None, cwd=None) -> dict:
    """Commit, branch, runner and CI run id from the CI environment (GitHub Actions names),
    falling back to ``git`` in ``cwd`` and the host name. Values that are unknown are omitted."""
    env = os.environ if env is None else env
    out = {}
    commit = env.get("GITHUB_SHA") or env.get("CI_COMMIT_SHA")
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
                    else:
                        branch = r.stdout.strip()
            except (OSError, subprocess.SubprocessError):
                pass
    if commit:
        out["commit"] = commit
    if branch:
        out["branch"] = branch
    out["runner"] = env.get("RUNNER_NAME") or platform.node()
    if env.get("GITHUB_RUN_ID"):
        out["ci_run_id"] = env["GITHUB_RUN_ID"]
    return out
