"""GitHub Actions: one sticky pull-request comment per key, the job summary, step outputs.

The comment is posted through github3.py (REST: ``GET /repos/{o}/{r}/issues/{n}``, ``GET
.../issues/{n}/comments`` following every ``Link: rel="next"`` page, ``POST`` to create,
``PATCH /repos/{o}/{r}/issues/comments/{id}`` to update). A run finds its own comment by the
hidden marker that starts the Markdown report (``<!-- perfgate:report key=KEY -->``, see
:func:`perfgate.report.markdown.marker`); the key is the baseline name plus, in a matrix, the
leg, so two legs keep two comments. When several comments carry the same marker (two jobs raced
to create it) the newest one (latest ``created_at``, then highest id) is updated.

Context comes from the Actions environment: ``GITHUB_EVENT_PATH`` (the event payload: PR number,
head / base SHA and repositories), ``GITHUB_REPOSITORY``, ``GITHUB_EVENT_NAME``, ``GITHUB_API_URL``
(``https://api.github.com`` on github.com; ``https://HOST/api/v3`` on GitHub Enterprise Server —
used as the API root as is, so github3.py's own ``/api/v3`` suffix is never doubled), and the
token from ``GITHUB_TOKEN`` (or another variable named by the caller). The token is never
printed, written to a file or kept in an exception text: every message that leaves this module
goes through :func:`redact`.

Failure never changes the gate's verdict: a fork pull request (read-only token: 403), a missing
PR (404), a 5xx that outlives the retries, a network error or a missing token all end in one
warning, and the comment body is left as ``perfgate-comment.md`` (plus ``perfgate-comment.json``
with repository, PR number and key; no token) for a follow-up ``workflow_run`` job that runs
``perfgate comment`` with a write token.

Retries: urllib3's ``Retry`` on connection errors and on HTTP 500/502/503/504, ``retries`` times
with exponential backoff (``backoff_s`` x 2^(n-1) seconds, the first retry immediate, each
sleep capped at ``4 x backoff_s``; a ``Retry-After`` header is ignored so a server cannot stretch
the wait). One request therefore takes at most
``(retries + 1) x (connect_timeout_s + read_timeout_s) + sum of the sleeps`` — with the defaults
(3 retries, 0.5 s, 5 s + 10 s) 60 s + 3 s. A POST retried after a 5xx that the server did
act on can leave a duplicate comment; the next run then updates the newest one.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from perfgate.ci_env import MERGE_QUEUE_EVENTS, PR_EVENTS
from perfgate import jsonout
from perfgate.errors import EXIT_STORE, PerfgateError, StoreError, UsageError
from perfgate.report.markdown import marker
from perfgate.store.atomic import write_atomic

GITHUB_COM_API = "https://api.github.com"
ACTIONS_BOT = "github-actions[bot]"  # the author of comments posted with the workflow's GITHUB_TOKEN
COMMENT_LIMIT = 65_536  # GitHub's limit on an issue comment body, in characters
#: step outputs written by :func:`publish_check` (action.yml maps each to an action output)
OUTPUT_NAMES = ("verdict", "exit-code", "gated", "regressions", "improvements", "junit", "markdown", "json",
                "comment-url", "comment-file", "merge-base")
_MARKER_RE = re.compile(r"^\s*<!-- perfgate:report key=(.*?) -->")
TRUNCATION_NOTE = ("\n\n_Comment truncated to stay under GitHub's 65,536-character limit; the full report "
                   "is in the job summary and the uploaded perfgate-report.md / perfgate-result.json._\n")


class PublishError(PerfgateError):
    """Posting the pull-request comment failed (exit 5 for ``perfgate comment``; a warning, never a
    changed exit code, for ``perfgate check --comment``). ``status`` is the HTTP status, if any."""
    exit_code = EXIT_STORE
    kind = "publish_error"

    def __init__(self, message: str, *, status: int | None = None, **kw):
        self.status = status
        super().__init__(message, **kw)


_SECRET_MIN = 8   # a token this long or longer is masked wherever it occurs


def redact(text, token: str | None) -> str:
    """``text`` with ``token`` (and any ``Authorization`` header value) replaced by ``***``.
    Used on everything this module prints, writes or raises. A token of at least
    :data:`_SECRET_MIN` (8) characters is masked wherever it occurs; a shorter one (``x``: no real
    secret) only where it stands as a whole word, so ``exception`` never reads ``e***ception``."""
    s = str(text)
    if token and len(token) >= _SECRET_MIN:
        s = s.replace(token, "***")
    elif token and token.strip():
        s = re.sub(r"(?<![A-Za-z0-9_\-])" + re.escape(token) + r"(?![A-Za-z0-9_\-])", "***", s)
    return re.sub(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(token|bearer|basic)\s+[^\s'\",}]+", r"\1\2 ***", s)


@dataclass(frozen=True)
class ActionsContext:
    """Where a run happens, read from the Actions environment (no token in here).

    ``pr_number`` is None outside pull-request (and issue-comment) events. ``is_fork``: the head
    repository differs from the base one, so ``GITHUB_TOKEN`` is read-only and the comment
    cannot be posted from this run."""
    repository: str | None = None
    event_name: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    head_repo: str | None = None
    base_repo: str | None = None
    api_url: str = GITHUB_COM_API
    run_url: str | None = None

    @property
    def is_fork(self) -> bool:
        return bool(self.head_repo and self.base_repo and self.head_repo != self.base_repo)

    @property
    def is_pull_request(self) -> bool:
        return self.event_name in PR_EVENTS

    @property
    def is_merge_queue(self) -> bool:
        """A merge-queue run (``merge_group``): it tests code that is not merged yet."""
        return self.event_name in MERGE_QUEUE_EVENTS

    def merge_base(self, cwd=None) -> str | None:
        """The merge-base commit of the PR's base and head SHAs (``git merge-base``, run in
        ``cwd``), or None when git, the SHAs or the history (shallow clone) are not there.
        This is the commit whose baseline the PR should be judged against."""
        if not (self.base_sha and self.head_sha) or any(
                not re.fullmatch(r"[0-9A-Za-z]{4,64}", s) for s in (self.base_sha, self.head_sha)):
            return None  # a SHA from a malformed payload is never passed to git (no "-..." options)
        try:
            r = subprocess.run(["git", "merge-base", self.base_sha, self.head_sha], cwd=cwd,
                               capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        sha = r.stdout.strip()
        return sha if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha) else None

    def to_dict(self, cwd=None) -> dict:
        d = asdict(self)
        d.update(is_fork=self.is_fork, is_pull_request=self.is_pull_request, is_merge_queue=self.is_merge_queue,
                 merge_base=self.merge_base(cwd), shallow_clone=is_shallow(cwd))
        return d


def is_shallow(cwd=None) -> bool:
    """True when ``cwd`` is inside a shallow git clone (``git rev-parse --is-shallow-repository``;
    actions/checkout fetches one commit unless ``fetch-depth: 0``). False outside git."""
    try:
        r = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=cwd, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == "true"


SHALLOW_WARNING = ("the merge-base of this pull request's base {base} and head {head} cannot be found: the clone "
                   "is shallow, so the relation between the baseline and this pull request is unknown; fetch the "
                   "history with actions/checkout `fetch-depth: 0`")


def _obj(value, where: str, problems: list) -> dict:
    """``value`` when it is a JSON object, else ``{}`` (a non-null value of another type is
    noted in ``problems`` as ``where`` and its JSON type)."""
    if isinstance(value, dict):
        return value
    if value is not None:
        problems.append(f"{where} is {_json_type(value)}, not an object")
    return {}


def _text(value, where: str, problems: list) -> str | None:
    """``value`` when it is a non-empty string, else None (another type is noted)."""
    if isinstance(value, str):
        return value or None
    if value is not None:
        problems.append(f"{where} is {_json_type(value)}, not a string")
    return None


def _sha(value, where: str, problems: list) -> str | None:
    """A commit SHA (4-64 letters / digits), else None (another type or text is noted)."""
    sha = _text(value, where, problems)
    if sha is not None and not re.fullmatch(r"[0-9A-Za-z]{4,64}", sha):
        problems.append(f"{where} {json.dumps(sha)[:50]} is not a commit SHA")
        return None
    return sha


def _pr_number(value, where: str, problems: list) -> int | None:
    """A pull-request number: a positive JSON integer (or a string of digits), else None
    (a float, a boolean, text or a number < 1 is noted)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    problems.append(f"{where} is {_json_type(value)} {json.dumps(value)[:40]}, not a positive integer")
    return None


def _json_type(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def context_from_env(env=None, *, problems: list | None = None) -> ActionsContext:
    """Read :class:`ActionsContext` from ``env`` (default ``os.environ``).

    The PR number and SHAs come from the event payload at ``GITHUB_EVENT_PATH``
    (``pull_request.number / head.sha / base.sha / head.repo.full_name / base.repo.full_name``;
    ``issue.number`` for issue-comment events; ``merge_group.head_sha / base_sha`` for merge-queue
    events); the repository from ``GITHUB_REPOSITORY`` or the payload. Without ``GITHUB_EVENT_PATH`` every PR field is None.

    Any JSON shape is tolerated below the top level: a field of the wrong type (``pull_request``
    a string, ``number`` ``"abc"`` or ``5.5``, ``base`` a string, ``repo`` a list, ...) is read as
    unknown (None) and one sentence per such field, naming it, is appended to ``problems`` when
    a list is given (callers report them as warnings; the verdict never depends on them).

    Raises:
        UsageError: ``GITHUB_EVENT_PATH`` is set but the file cannot be read, is not UTF-8 JSON or
            is not a JSON object (the message names the file).
    """
    env = os.environ if env is None else env
    payload = {}
    found: list[str] = []
    path = env.get("GITHUB_EVENT_PATH")
    if path:
        try:
            payload = jsonout.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise UsageError(f"cannot read the event payload: {e.strerror}", path=path) from None
        except ValueError as e:  # also UnicodeDecodeError
            raise UsageError(f"the event payload is not valid JSON: {e}", path=path) from None
        if not isinstance(payload, dict):
            raise UsageError(f"the event payload is {_json_type(payload)}, not a JSON object", path=path)
    pr = _obj(payload.get("pull_request"), "pull_request", found)
    head = _obj(pr.get("head"), "pull_request.head", found)
    base = _obj(pr.get("base"), "pull_request.base", found)
    head_sha = _sha(head.get("sha"), "pull_request.head.sha", found)
    base_sha = _sha(base.get("sha"), "pull_request.base.sha", found)
    mg = _obj(payload.get("merge_group"), "merge_group", found)
    if mg and not pr:  # merge queue: merge_group.head_sha / base_sha (no pull_request object)
        head_sha = _sha(mg.get("head_sha"), "merge_group.head_sha", found)
        base_sha = _sha(mg.get("base_sha"), "merge_group.base_sha", found)
    number = _pr_number(pr.get("number"), "pull_request.number", found)
    if number is None and "number" not in pr:
        number = _pr_number(_obj(payload.get("issue"), "issue", found).get("number"), "issue.number", found)
    repo = env.get("GITHUB_REPOSITORY") or _text(_obj(payload.get("repository"), "repository", found)
                                                 .get("full_name"), "repository.full_name", found)
    server = env.get("GITHUB_SERVER_URL")
    run_url = f"{server}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}" if server and repo and env.get(
        "GITHUB_RUN_ID") else None
    ctx = ActionsContext(
        repository=repo, event_name=env.get("GITHUB_EVENT_NAME"), pr_number=number,
        head_sha=head_sha, base_sha=base_sha,
        head_repo=_text(_obj(head.get("repo"), "pull_request.head.repo", found).get("full_name"),
                        "pull_request.head.repo.full_name", found),
        base_repo=_text(_obj(base.get("repo"), "pull_request.base.repo", found).get("full_name"),
                        "pull_request.base.repo.full_name", found),
        api_url=(env.get("GITHUB_API_URL") or GITHUB_COM_API).rstrip("/"), run_url=run_url)
    if problems is not None and found:
        problems.append(f"the event payload {path} is malformed ({'; '.join(found[:5])}"
                        f"{'; ...' if len(found) > 5 else ''}): those pull-request facts are treated as unknown")
    return ctx


def _utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def fit_comment(body: str, limit: int = COMMENT_LIMIT) -> str:
    """``body`` cut to at most ``limit`` characters (counted in UTF-16 code units, as GitHub's
    web API counts them, so emoji count 2) for a PR comment.

    The head — marker, verdict, counts, table of gated regressions, up to the first
    ``<details>`` — is kept whole when it fits; the details are cut at a line boundary, open
    ``<details>`` blocks are closed, and a note says where the full report is. When the head
    alone is too long it is cut at a line boundary instead (the marker and verdict lines come
    first, so they always survive)."""
    if _utf16_len(body) <= limit:
        return body
    budget = limit - _utf16_len(TRUNCATION_NOTE) - 64
    lines = body.split("\n")
    kept, size = [], 0
    for ln in lines:
        n = _utf16_len(ln) + 1
        if size + n > budget:
            break
        kept.append(ln)
        size += n
    if not kept:  # a single giant first line: cut it by characters
        kept = [body[:budget // 2]]
    text = "\n".join(kept)
    open_details = text.count("<details") - text.count("</details>")
    text += "\n</details>" * max(0, open_details)
    return text + TRUNCATION_NOTE


def marker_key(body: str) -> str | None:
    """The key of the perfgate marker that starts ``body``, or None."""
    m = _MARKER_RE.match(body)
    return m.group(1) if m else None


def github_client(api_url: str, token: str, *, retries: int = 3, backoff_s: float = 0.5,
                  connect_timeout_s: float = 5.0, read_timeout_s: float = 10.0):
    """A github3.py client for ``api_url`` with bounded retries (see the module docstring).

    ``https://api.github.com`` gives ``github3.GitHub``; anything else ``github3.GitHubEnterprise``
    whose API root is set to ``api_url`` exactly (``GITHUB_API_URL`` already ends in ``/api/v3``
    on GitHub Enterprise Server; github3.py would append it a second time)."""
    import github3
    from github3.session import GitHubSession
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = GitHubSession(default_connect_timeout=connect_timeout_s, default_read_timeout=read_timeout_s)
    retry = Retry(total=retries, connect=retries, read=retries, status=retries, other=0,
                  backoff_factor=backoff_s, backoff_max=4 * backoff_s,
                  status_forcelist=(500, 502, 503, 504), allowed_methods=frozenset({"GET", "POST", "PATCH"}),
                  respect_retry_after_header=False, raise_on_status=False)
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    api = api_url.rstrip("/")
    if api == GITHUB_COM_API:
        return github3.GitHub(token=token, session=session)
    root = api[: -len("/api/v3")] if api.endswith("/api/v3") else api
    gh = github3.GitHubEnterprise(root, token=token, session=session)
    gh.session.base_url = api
    return gh


@dataclass
class CommentOutcome:
    """What happened to the PR comment.

    ``action``: ``created`` / ``updated`` / ``skipped`` (not a PR, or commenting off) /
    ``stale`` (the run's head is no longer the PR's head: left alone) / ``failed``. ``fallback``: files left for a follow-up job when it failed. ``warning``: the one
    line to show the user (token-free). ``duplicates``: other comments of ours with the same
    marker. ``foreign``: comments with the marker written by someone else (left untouched)."""
    action: str
    comment_id: int | None = None
    url: str | None = None
    duplicates: int = 0
    truncated: bool = False
    warning: str | None = None
    status: int | None = None
    fallback: dict = field(default_factory=dict)
    foreign: int = 0


def token_login(gh, author: str | None = None) -> str:
    """The login whose comments this token may update: ``author`` when given (a GitHub App's
    bot, ``<slug>[bot]``, via ``$PERFGATE_COMMENT_AUTHOR``), else the authenticated user
    (``GET /user``), else — an installation token such as the workflow's ``GITHUB_TOKEN``, for
    which ``GET /user`` is 403 — :data:`ACTIONS_BOT`.

    Raises:
        github3 / requests exceptions other than 403 (the caller redacts them)."""
    if author:
        return author
    from github3.exceptions import ForbiddenError
    try:
        me = gh.me()
    except ForbiddenError:  # "Resource not accessible by integration": an app installation token
        return ACTIONS_BOT
    return getattr(me, "login", None) or ACTIONS_BOT


_KEY_CHARS = re.compile(r"[\w.@:+/=-]")


def require_comment_key(key, option: str = "comment key") -> str:
    """``key`` as given when it can sit in the hidden marker ``<!-- perfgate:report key=KEY -->``
    and be found again by :func:`marker_key` on the next run: 1-200 of letters, digits and
    ``. _ @ : + / = -``, no ``--`` (``-->`` would end the HTML comment early; ``--`` inside a
    comment is not valid HTML).

    Raises:
        UsageError (exit 2): naming ``option`` and the offending text (the ``--`` run, or the first
        character outside the set, or the length).
    """
    key = "" if key is None else str(key)
    what = None
    if not key:
        what = "it is empty"
    elif len(key) > 200:
        what = f"it is {len(key)} characters long (at most 200)"
    elif "--" in key:
        run = re.search(r"-{2,}>?", key).group(0)
        what = f"it contains {run!r}, which would end or break the HTML comment marker"
    else:
        bad = next((ch for ch in key if not _KEY_CHARS.fullmatch(ch)), None)
        if bad is not None:
            what = f"it contains {bad!r}"
    if what:
        raise UsageError(f"{option} {key!r} cannot be a sticky-comment key: {what}; use 1-200 of letters, "
                         f"digits and . _ @ : + / = - (no '--')")
    if marker_key(marker(key)) != key:   # the marker must round-trip to this key
        raise UsageError(f"{option} {key!r} cannot be a sticky-comment key: its marker does not read back")
    return key


def upsert_comment(gh, repository: str, pr_number: int, body: str, key: str, *,
                   author: str | None = None) -> CommentOutcome:
    """Create the PR comment for ``key``, or update the newest existing one in place.

    ``body`` must start with ``marker(key)`` (it is prepended when missing) and is passed
    through :func:`fit_comment`. Every page of comments is read. Only a marked comment written by
    this token's identity (:func:`token_login`) is updated: a person's comment that happens to
    start with the marker is never edited (``foreign`` counts such comments).

    Raises:
        UsageError: ``repository`` is not ``owner/name``, or ``key`` could break the HTML comment.
        PublishError: the PR does not exist (404).
        github3 / requests exceptions for HTTP and network failures (the caller redacts them).
    """
    owner, sep, name = repository.partition("/")
    if not (owner and sep and name) or "/" in name:
        raise UsageError(f"repository must be OWNER/NAME, got {repository!r}")
    require_comment_key(key)
    tag = marker(key)
    if not body.lstrip().startswith(tag):
        body = tag + "\n\n" + body
    fitted = fit_comment(body)
    issue = gh.issue(owner, name, int(pr_number))
    if issue is None:
        raise PublishError(f"pull request #{pr_number} not found in {repository}", status=404)
    marked = [c for c in issue.comments() if (c.body or "").lstrip().startswith(tag)]
    mine, foreign = marked, 0
    if marked:  # only comments written by this token's own identity are ever edited
        me = token_login(gh, author)
        mine = [c for c in marked if getattr(getattr(c, "user", None), "login", None) == me]
        foreign = len(marked) - len(mine)
    if mine:
        newest = max(mine, key=lambda c: (c.created_at, c.id))
        if not newest.edit(fitted):
            raise PublishError(f"GitHub did not accept the edit of comment {newest.id}")
        return CommentOutcome("updated", newest.id, newest.html_url, len(mine) - 1, fitted != body, foreign=foreign)
    c = issue.create_comment(fitted)
    if c is None:
        raise PublishError(f"GitHub returned no comment for the new comment on #{pr_number}")
    return CommentOutcome("created", c.id, c.html_url, 0, fitted != body, foreign=foreign)


def _status_of(e) -> int | None:
    code = getattr(e, "code", None) or getattr(e, "status", None)
    return code if isinstance(code, int) else None


def publish_report(body: str, *, ctx: ActionsContext, token: str | None, key: str, out_dir,
                   client_options: dict | None = None, token_name: str = "GITHUB_TOKEN",
                   author: str | None = None) -> CommentOutcome:
    """Post ``body`` as the sticky PR comment for ``key``; never raises for a comment failure.

    Returns a :class:`CommentOutcome`. On failure (no token, fork / read-only token 403, 404,
    5xx after the retries, network error) ``out_dir/perfgate-comment.md`` (the fitted body) and
    ``out_dir/perfgate-comment.json`` (repository, pr_number, key, head_sha, error — never the
    token) are written and ``warning`` says why, token-free. Not a pull request: ``skipped``. A run
    whose head commit is no longer the pull request's head (:func:`stale_head`): ``stale``, the
    comment left as it is and ``warning`` saying why.

    Raises:
        StoreError: only when the fallback files themselves cannot be written.
    """
    if ctx.pr_number is None or not ctx.repository:
        return CommentOutcome("skipped")  # a push or a local run: nothing to comment on
    try:
        if not token:
            raise PublishError(f"no token: ${token_name} is not set (pass the workflow's github.token)")
        gh = github_client(ctx.api_url, token, **(client_options or {}))
        stale = stale_head(gh, ctx)
        if stale:
            return CommentOutcome("stale", warning=stale)
        return upsert_comment(gh, ctx.repository, ctx.pr_number, body, key, author=author)
    except Exception as e:  # noqa: BLE001 - no comment failure may change the gate's verdict
        status = _status_of(e)
        what = f"HTTP {status}: " if status else ""
        detail = getattr(e, "msg", None) or getattr(e, "message", None) or str(e) or type(e).__name__
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        reason = redact(f"{what}{detail}", token)[:300]
        if status == 403 and ctx.is_fork:
            reason += f" (pull request from the fork {ctx.head_repo}: its token is read-only)"
        out = Path(out_dir)
        md = write_atomic(out / "perfgate-comment.md", fit_comment(
            body if body.lstrip().startswith(marker(key)) else marker(key) + "\n\n" + body))
        meta = {"repository": ctx.repository, "pr_number": ctx.pr_number, "key": key,
                "head_sha": ctx.head_sha, "api_url": ctx.api_url, "error": reason}
        js = write_atomic(out / "perfgate-comment.json", json.dumps(meta, indent=1) + "\n")
        warning = (f"could not post the pull-request comment on {ctx.repository}#{ctx.pr_number} ({reason}); "
                   f"the verdict is unchanged; the comment body is in {md} for a follow-up workflow_run "
                   f"job (perfgate comment {md} --meta {js})")
        return CommentOutcome("failed", status=status, warning=redact(warning, token),
                              fallback={"markdown": str(md), "meta": str(js)})


def stale_head(gh, ctx: ActionsContext) -> str | None:
    """Why this run must leave the pull request's sticky comment alone, or None.

    A run for an older head commit can finish after the run for the pull request's current head
    (a push while the gate ran): editing the comment then would replace the current head's
    verdict (say REGRESSION) with the older one's (PASS). The pull request's head is read now
    (``GET /repos/{repository}/pulls/{n}``, ``head.sha``) and compared with the head the run
    tested (the event payload's ``pull_request.head.sha``). Not checked where the run names no
    head commit (an ``issue_comment`` event) or GitHub's answer has none. A push between this
    read and the edit is not seen: the next run for that push edits the comment after it.

    Raises:
        github3.exceptions.GitHubError: an HTTP error (404: no such pull request; 5xx after the
            retries); requests exceptions for network failures (the caller redacts both)."""
    if not ctx.head_sha or ctx.event_name not in PR_EVENTS:
        return None
    r = gh.session.get(f"{ctx.api_url.rstrip('/')}/repos/{ctx.repository}/pulls/{int(ctx.pr_number)}")
    if r.status_code >= 400:   # as github3.py reports the comment calls' failures (404 Not Found, 5xx)
        from github3.exceptions import error_for
        raise error_for(r)
    current = ((r.json() or {}).get("head") or {}).get("sha")
    if not current or current == ctx.head_sha:
        return None
    return (f"the pull-request comment on {ctx.repository}#{ctx.pr_number} was left as it is: this run tested "
            f"commit {ctx.head_sha}, and the pull request's head is now {current} (a newer push; the run for "
            f"that commit reports there). The verdict and exit code are this run's")


def _require_pr_head(gh, api_url: str, repository: str, pr_number: int, head_sha: str) -> None:
    """Refuse to comment on pull request ``pr_number`` unless its head commit is ``head_sha``
    (``GET /repos/{repository}/pulls/{n}``, ``head.sha``): the PR number of a fork's artifact is
    trusted only when that PR really is the one the workflow run tested.

    Raises:
        UsageError: another head commit, or no such pull request.
        requests exceptions for HTTP and network failures (the caller redacts them)."""
    r = gh.session.get(f"{api_url.rstrip('/')}/repos/{repository}/pulls/{int(pr_number)}")
    if r.status_code == 404:
        raise UsageError(f"pull request #{pr_number} not found in {repository}: not posted")
    r.raise_for_status()
    got = ((r.json() or {}).get("head") or {}).get("sha")
    if got != head_sha:
        raise UsageError(f"pull request #{pr_number} of {repository} has head {str(got)[:40]}, not the workflow "
                         f"run's {head_sha}: the comment metadata names another pull request; not posted")


def post_comment_file(body_file, *, key=None, repository=None, pr_number=None, meta=None, api_url=None,
                      head_sha=None, token=None, token_name="GITHUB_TOKEN", env=None,
                      client_options=None) -> CommentOutcome:
    """Post a Markdown report file as the sticky comment (``perfgate comment``; the follow-up
    ``workflow_run`` job of a fork PR).

    ``meta`` (the ``perfgate-comment.json`` a failed check left) was written by a job that ran the
    pull request's code, so it is untrusted: it may give the key and the PR number, never where the
    write token goes. The API URL is the argument, else ``$GITHUB_API_URL`` (else github.com); the
    repository the argument, else ``$GITHUB_REPOSITORY``; a ``meta`` naming another repository is
    refused. The key comes from the argument, else ``meta``, else the file's own marker; the PR
    number from the argument, else ``meta``, else the event; a number from ``meta`` is used only
    with ``head_sha`` (else UsageError). ``head_sha`` (the workflow run's ``head_sha``): the pull
    request must have that head commit, and ``meta``'s ``head_sha`` (when it has one) must be it,
    so a ``meta`` naming another pull request is refused before anything is written.

    Raises:
        UsageError: no key, no PR, no token, unreadable ``meta``, a ``meta`` naming another
            repository, a PR number taken from ``meta`` without ``head_sha`` (empty counts as
            none), a PR whose head is not ``head_sha``.
        PublishError: GitHub refused or could not be reached (message token-free).
    """
    import dataclasses
    ctx = context_from_env(env)
    extra = {}
    if meta:
        try:
            extra = json.loads(Path(meta).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read the comment metadata: {e}", path=meta) from None
    try:
        body = Path(body_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read the comment body: {e}", path=body_file) from None
    if not isinstance(extra, dict):
        raise UsageError("the comment metadata is not a JSON object", path=meta)
    key = key or extra.get("key") or marker_key(body)
    repository = repository or ctx.repository
    claimed = extra.get("repository")
    if claimed and repository and claimed != repository:
        raise UsageError(f"the comment metadata names repository {str(claimed)[:100]!r}, this run is for "
                         f"{repository!r}: not posted (the metadata comes from the pull request's job and "
                         f"never chooses where the token goes)", path=meta)
    from_meta = not pr_number and bool(extra.get("pr_number"))
    pr_number = pr_number or extra.get("pr_number") or ctx.pr_number
    if not key:
        raise UsageError("no comment key: the body has no perfgate marker; pass --key", path=body_file)
    if not repository or not pr_number:
        raise UsageError("no pull request: pass --repo (or set $GITHUB_REPOSITORY) and --pr (or --meta, "
                         "or run in a pull_request event)")
    if isinstance(pr_number, bool) or not re.fullmatch(r"[1-9][0-9]{0,9}", str(pr_number)):
        raise UsageError(f"the pull request number {str(pr_number)[:40]!r} is not a positive integer", path=meta)
    if from_meta and not head_sha:
        # the number was written by the pull request's own job: it may name any pull request of
        # this repository, so it is used only once that pull request's head is the run's commit
        raise UsageError("the pull request number comes from the comment metadata, which the pull request's "
                         "job wrote (untrusted): pass --head-sha (the workflow run's head commit, "
                         "github.event.workflow_run.head_sha) so its head can be verified, or --pr; not posted",
                         path=meta)
    if head_sha and extra.get("head_sha") and extra["head_sha"] != head_sha:
        raise UsageError(f"the comment metadata was written for commit {str(extra['head_sha'])[:40]}, the "
                         f"workflow run is for {head_sha}: not posted", path=meta)
    if not token:
        raise UsageError(f"no token: ${token_name} is not set")
    ctx = dataclasses.replace(ctx, api_url=(api_url or ctx.api_url).rstrip("/"))
    try:
        env = os.environ if env is None else env
        gh = github_client(ctx.api_url, token, **(client_options or {}))
        if head_sha:
            _require_pr_head(gh, ctx.api_url, repository, int(pr_number), head_sha)
        return upsert_comment(gh, repository, int(pr_number), body, key, author=env.get("PERFGATE_COMMENT_AUTHOR"))
    except PerfgateError as e:
        e.message = redact(e.message, token)
        raise
    except Exception as e:  # noqa: BLE001 - github3 / requests failures become one clear, token-free error
        status = _status_of(e)
        detail = getattr(e, "msg", None) or str(e) or type(e).__name__
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise PublishError(redact(f"could not post the comment on {repository}#{pr_number}: "
                                  f"{'HTTP %s: ' % status if status else ''}{detail}", token)[:500],
                           status=status) from None


def append_step_summary(path, text: str) -> Path:
    """Append ``text`` to the job summary file (``$GITHUB_STEP_SUMMARY``; GitHub renders it
    as Markdown on the run page, 1 MiB per step).

    Raises:
        StoreError: the file cannot be opened for appending."""
    p = Path(path)
    try:
        with open(p, "a", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n\n")
    except OSError as e:
        raise StoreError(f"cannot append the job summary: {e.strerror}", path=p) from None
    return p


def write_outputs(path, values: dict) -> Path:
    """Append step outputs to ``$GITHUB_OUTPUT`` (``name=value`` lines; a value with a newline
    uses the ``name<<DELIM`` form). None values are written as empty strings.

    Raises:
        StoreError: the file cannot be opened for appending."""
    p = Path(path)
    lines = []
    for k, v in values.items():
        v = "" if v is None else str(v)
        if "\n" in v:
            delim = "PERFGATE_EOF"
            while delim in v:
                delim += "_"
            lines.append(f"{k}<<{delim}\n{v}\n{delim}")
        else:
            lines.append(f"{k}={v}")
    try:
        with open(p, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as e:
        raise StoreError(f"cannot append the step outputs: {e.strerror}", path=p) from None
    return p


def baseline_note(markdown: str, baseline_provenance: dict | None, merge_base: str | None, *,
                  shallow: bool = False) -> str:
    """``markdown`` with one line after the verdict heading naming the baseline's commit and the
    pull request's merge-base when both are known and differ (a stale or newer baseline judges
    changes that are not the PR's own). With ``shallow`` (the merge-base could not be found
    because the clone is shallow) the line says the relation is unknown and how to fix it.
    Unchanged otherwise."""
    commit = (baseline_provenance or {}).get("commit")
    if shallow and not merge_base:
        saved = f"Baseline saved at commit `{commit[:12]}`" if commit else "Baseline commit unknown"
        note = (f"> {saved}; this pull request's merge-base is unknown (shallow clone): the relation between "
                f"the baseline and this pull request is unknown. Check out with `fetch-depth: 0` to know it.")
    elif not (commit and merge_base) or commit == merge_base:
        return markdown
    else:
        note = (f"> Baseline saved at commit `{commit[:12]}`; this pull request's merge-base is `{merge_base[:12]}`: "
                f"differences also include commits between the two.")
    lines = markdown.split("\n")
    at = next((i for i, ln in enumerate(lines) if ln.startswith("## ")), 0)
    return "\n".join(lines[:at + 1] + ["", note] + lines[at + 1:])


def pull_request_comment(result, key: str, paths: dict, run_url: str | None = None) -> str:
    """The sticky comment's body: the verdict, its causes, what a green means and where the full
    report is (:func:`perfgate.report.comment.render_comment`, at most 16 KB). ``paths``: the
    report files of the check (``markdown`` / ``json``, named in the pointer); ``run_url``: the
    Actions run page, whose job summary holds the full report."""
    from perfgate.report.comment import ReportPointer, render_comment
    names = {k: Path(str(v)).name for k, v in paths.items() if k in ("markdown", "json") and v
             and str(v) != "<stdout>"}
    return render_comment(result, key=key, pointer=ReportPointer(run_url=run_url, **names))


def publish_check(result, paths: dict, *, markdown: str, comment: bool, key: str, out_dir, env=None,
                  token_env: str = "GITHUB_TOKEN", summary: bool = True, client_options: dict | None = None,
                  cwd=None) -> dict:
    """Everything ``perfgate check`` does in GitHub Actions after writing its reports.

    * ``summary`` and ``$GITHUB_STEP_SUMMARY`` set: the Markdown report is appended to it;
    * ``comment``: :func:`publish_report` of :func:`pull_request_comment` (the verdict, causes,
      green line and a pointer to the full report, at most 16 KB) with the context from ``env``;
    * ``$GITHUB_OUTPUT`` set: outputs ``verdict``, ``exit-code``, ``gated``, ``regressions``,
      ``improvements``, ``junit``, ``markdown``, ``json``, ``comment-url``, ``comment-file``,
      ``merge-base``;
    * in a pull request whose merge-base (``git merge-base`` in ``cwd``) is not the baseline's
      commit, :func:`baseline_note` adds a line saying so to the summary and the comment; when the
      merge-base cannot be found because the clone is shallow, a warning names the fix
      (``fetch-depth: 0``) and the line says the relation is unknown.

    Returns ``{"comment": CommentOutcome | None, "summary": path | None, "outputs": path | None,
    "warnings": [str]}``. Never raises: a failed summary / output write is a warning too, since
    none of this may change the gate's exit code."""
    from perfgate import terms
    env = os.environ if env is None else env
    token = env.get(token_env)
    warnings: list[str] = []
    res = {"comment": None, "summary": None, "outputs": None, "warnings": warnings}
    ctx = None
    if comment or env.get("GITHUB_OUTPUT") or (summary and env.get("GITHUB_STEP_SUMMARY")):
        try:
            ctx = context_from_env(env, problems=warnings)
        except UsageError as e:
            warnings.append(e.render() + "; the pull-request facts are treated as unknown")
            ctx = context_from_env({k: v for k, v in env.items() if k != "GITHUB_EVENT_PATH"})
        except Exception as e:  # noqa: BLE001 - the payload never decides the verdict or its exit code
            warnings.append(f"the event payload could not be read ({type(e).__name__}: {e}); "
                            f"the pull-request facts are treated as unknown")
    merge_base = ctx.merge_base(cwd) if ctx is not None and ctx.is_pull_request else None
    shallow = bool(ctx is not None and ctx.is_pull_request and ctx.base_sha and ctx.head_sha and not merge_base
                   and is_shallow(cwd))
    if shallow:
        warnings.append(SHALLOW_WARNING.format(base=ctx.base_sha[:12], head=ctx.head_sha[:12]))
    markdown = baseline_note(markdown, result.baseline_provenance, merge_base, shallow=shallow)
    if summary and env.get("GITHUB_STEP_SUMMARY"):
        try:
            res["summary"] = append_step_summary(env["GITHUB_STEP_SUMMARY"], markdown)
        except StoreError as e:
            warnings.append(e.render())
    if comment and ctx is not None:
        body = baseline_note(pull_request_comment(result, key, paths, ctx.run_url), result.baseline_provenance,
                             merge_base, shallow=shallow)
        try:
            out = publish_report(body, ctx=ctx, token=token, key=key, out_dir=out_dir,
                                 client_options=client_options, token_name=token_env,
                                 author=env.get("PERFGATE_COMMENT_AUTHOR"))
        except StoreError as e:
            out = CommentOutcome("failed", warning=redact(e.render(), token))
        res["comment"] = out
        if out.warning:
            warnings.append(out.warning)
        if out.action == "stale" and res["summary"] is not None:   # the run page says why, too
            try:
                append_step_summary(res["summary"], f"> **perfgate:** {out.warning}.")
            except StoreError as e:
                warnings.append(e.render())
        elif out.action == "skipped":
            warnings.append(f"--comment: no pull request in this run (event {ctx.event_name or 'none'}); "
                            f"no comment posted")
    if env.get("GITHUB_OUTPUT"):
        n = result.counts()
        gated = [c for c in result.comparisons if c.gated]
        co = res["comment"]
        values = {"verdict": result.status, "exit-code": result.exit_code, "gated": len(gated),
                  "regressions": n["gated_regressions"],
                  "improvements": sum(1 for c in gated if c.verdict == terms.IMPROVEMENT),
                  "junit": paths.get("junit"), "markdown": paths.get("markdown"), "json": paths.get("json"),
                  "comment-url": co.url if co else "", "comment-file": (co.fallback.get("markdown") if co else ""),
                  "merge-base": merge_base or ""}
        try:
            res["outputs"] = write_outputs(env["GITHUB_OUTPUT"], values)
        except StoreError as e:
            warnings.append(e.render())
    res["warnings"] = [redact(w, token) for w in warnings]
    return res
