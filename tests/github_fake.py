"""A small GitHub Enterprise REST server for tests: real HTTP on 127.0.0.1 (werkzeug), the few
endpoints perfgate's comment upsert uses, with GitHub's shapes and behaviours:

* ``GET  /api/v3/repos/{o}/{r}/issues/{n}``                    the pull request's issue
* ``GET  /api/v3/repos/{o}/{r}/issues/{n}/comments``           ``per_page`` (capped at
  ``max_per_page``) and ``page``, with a ``Link`` header (``rel="next"`` / ``rel="last"``)
* ``POST /api/v3/repos/{o}/{r}/issues/{n}/comments``           201
* ``PATCH /api/v3/repos/{o}/{r}/issues/comments/{id}``         200
* ``GET  /api/v3/repos/{o}/{r}/pulls/{n}``                     the pull request (``head.sha`` only)
* ``GET  /api/v3/user``                                         the token's user (``logins``); an
  installation token (no login, like the workflow's GITHUB_TOKEN) gets 403 "Resource not
  accessible by integration" and its comments are authored by ``github-actions[bot]``

Tokens are ``write`` or ``read`` (a fork PR's token: writes get 403 "Resource not accessible by
integration"); an unknown token gets 401. ``fail_with`` queues statuses returned before any
real handling (5xx tests); ``echo_auth`` makes error bodies repeat the Authorization header, as a
badly behaved proxy might, to prove the token is redacted. Bodies over 65,536 characters get 422
as on GitHub. Every request is logged in ``log``.
"""
from __future__ import annotations

import itertools
import json
import logging
import re
import threading
from datetime import datetime, timedelta, timezone

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log on stderr


class FakeGitHub:
    def __init__(self, tokens=None, max_per_page=100, logins=None):
        self.tokens = dict(tokens or {"write-token-123": "write"})
        self.logins = dict(logins or {})  # token -> user login; absent = an installation token
        self.max_per_page = max_per_page
        self.comments: dict[tuple, list[dict]] = {}
        self.prs: set[tuple] = set()
        self.heads: dict[tuple, str] = {}   # (repo, number) -> head commit (GET .../pulls/{n})
        self.log: list[dict] = []
        self.fail_with: list[tuple[int, dict]] = []
        self.echo_auth = False
        self._ids = itertools.count(1000)
        self._clock = itertools.count(1)
        self._lock = threading.Lock()
        self.server = make_server("127.0.0.1", 0, self.wsgi, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.api_url = self.url + "/api/v3"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # --- lifecycle -----------------------------------------------------------------------
    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # --- state helpers -------------------------------------------------------------------
    def add_pr(self, repo: str, number: int, head_sha: str | None = None):
        self.prs.add((repo, number))
        self.heads[(repo, number)] = head_sha   # None: no head modelled (GET .../pulls/{n} answers without one)
        self.comments.setdefault((repo, number), [])

    def _now(self):
        return (T0 + timedelta(seconds=next(self._clock))).strftime("%Y-%m-%dT%H:%M:%SZ")

    def seed(self, repo: str, number: int, body: str, login="github-actions[bot]"):
        with self._lock:
            c = self._comment(repo, number, body, login)
            self.comments[(repo, number)].append(c)
            return c

    def requests(self, method=None):
        return [r for r in self.log if method is None or r["method"] == method]

    # --- JSON shapes -----------------------------------------------------------------------
    def _user(self, login):
        u = f"{self.api_url}/users/{login}"
        return {"login": login, "id": abs(hash(login)) % 10_000, "type": "Bot", "site_admin": False,
                "avatar_url": "", "gravatar_id": "", "url": u, "html_url": f"{self.url}/{login}",
                "events_url": u + "/events{/privacy}", "followers_url": u + "/followers",
                "following_url": u + "/following{/other_user}", "gists_url": u + "/gists{/gist_id}",
                "organizations_url": u + "/orgs", "received_events_url": u + "/received_events",
                "repos_url": u + "/repos", "starred_url": u + "/starred{/owner}{/repo}",
                "subscriptions_url": u + "/subscriptions"}

    def _comment(self, repo, number, body, login):
        cid = next(self._ids)
        now = self._now()
        return {"id": cid, "url": f"{self.api_url}/repos/{repo}/issues/comments/{cid}",
                "html_url": f"{self.url}/{repo}/pull/{number}#issuecomment-{cid}",
                "issue_url": f"{self.api_url}/repos/{repo}/issues/{number}", "author_association": "NONE",
                "body": body, "body_html": "", "body_text": body, "created_at": now, "updated_at": now,
                "user": self._user(login), "_pr": (repo, number)}

    def _public(self, c):
        return {k: v for k, v in c.items() if not k.startswith("_")}

    def _issue(self, repo, number):
        u = f"{self.api_url}/repos/{repo}/issues/{number}"
        return {"id": number, "number": number, "url": u, "html_url": f"{self.url}/{repo}/pull/{number}",
                "comments_url": u + "/comments", "events_url": u + "/events", "labels_url": u + "/labels{/name}",
                "title": "a PR", "body": "", "body_html": "", "body_text": "", "state": "open", "locked": False,
                "assignee": None, "assignees": [], "milestone": None, "labels": [], "closed_at": None,
                "closed_by": None, "comments": len(self.comments.get((repo, number), [])),
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
                "pull_request": {"url": f"{self.api_url}/repos/{repo}/pulls/{number}"}, "user": self._user("dev")}

    # --- WSGI ------------------------------------------------------------------------------
    def _json(self, data, status=200, headers=None):
        return Response(json.dumps(data), status=status, headers=headers or {}, content_type="application/json")

    def _error(self, status, message, req):
        if self.echo_auth:
            message += f" (request headers: Authorization: {req.headers.get('Authorization')})"
        return self._json({"message": message, "documentation_url": "https://docs.github.com/rest"}, status)

    def wsgi(self, environ, start_response):
        req = Request(environ)
        with self._lock:
            resp = self._handle(req)
        return resp(environ, start_response)

    def _handle(self, req):
        self.log.append({"method": req.method, "path": req.path, "query": dict(req.args),
                         "auth": req.headers.get("Authorization")})
        if self.fail_with:
            status, headers = self.fail_with.pop(0)
            return Response("<html>upstream error</html>", status=status, headers=headers)
        auth = req.headers.get("Authorization", "")
        token = auth.split(" ", 1)[1] if " " in auth else ""
        access = self.tokens.get(token)
        if access is None:
            return self._error(401, "Bad credentials", req)
        if req.path == "/api/v3/user" and req.method == "GET":
            if token not in self.logins:
                return self._error(403, "Resource not accessible by integration", req)
            return self._json({**self._user(self.logins[token]), "type": "User", "name": None, "company": None,
                               "blog": "", "location": None, "email": None, "hireable": None, "bio": None,
                               "public_repos": 0, "public_gists": 0, "followers": 0, "following": 0,
                               "created_at": "2020-01-01T00:00:00Z", "updated_at": "2020-01-01T00:00:00Z",
                               "private_gists": 0, "total_private_repos": 0, "owned_private_repos": 0,
                               "disk_usage": 0, "collaborators": 0, "two_factor_authentication": False,
                               "plan": {"name": "free", "space": 0, "private_repos": 0, "collaborators": 0}})
        m = re.fullmatch(r"/api/v3/repos/([^/]+/[^/]+)/pulls/(\d+)", req.path)
        if m and req.method == "GET":
            key = (m.group(1), int(m.group(2)))
            if key not in self.prs:
                return self._error(404, "Not Found", req)
            return self._json({"number": key[1], "state": "open", "head": {"sha": self.heads[key]}})
        m = re.fullmatch(r"/api/v3/repos/([^/]+/[^/]+)/issues/(\d+)(/comments)?", req.path)
        if m:
            repo, number = m.group(1), int(m.group(2))
            if (repo, number) not in self.prs:
                return self._error(404, "Not Found", req)
            if not m.group(3):
                return self._json(self._issue(repo, number)) if req.method == "GET" else self._error(405, "x", req)
            if req.method == "GET":
                return self._list(req, repo, number)
            if req.method == "POST":
                if access != "write":
                    return self._error(403, "Resource not accessible by integration", req)
                body = (req.get_json(force=True) or {}).get("body", "")
                if len(body) > 65_536:
                    return self._error(422, "Validation Failed: body is too long (maximum is 65536 characters)",
                                       req)
                c = self._comment(repo, number, body, self.logins.get(token, "github-actions[bot]"))
                self.comments[(repo, number)].append(c)
                return self._json(self._public(c), 201)
        m = re.fullmatch(r"/api/v3/repos/([^/]+/[^/]+)/issues/comments/(\d+)", req.path)
        if m and req.method == "PATCH":
            if access != "write":
                return self._error(403, "Resource not accessible by integration", req)
            for c in (c for cs in self.comments.values() for c in cs if c["_pr"][0] == m.group(1)):
                if c["id"] == int(m.group(2)):
                    body = (req.get_json(force=True) or {}).get("body", "")
                    if len(body) > 65_536:
                        return self._error(422, "Validation Failed: body is too long", req)
                    c["body"] = c["body_text"] = body
                    c["updated_at"] = self._now()
                    return self._json(self._public(c))
            return self._error(404, "Not Found", req)
        return self._error(404, "Not Found", req)

    def _list(self, req, repo, number):
        items = self.comments[(repo, number)]
        per = min(int(req.args.get("per_page", 30)), self.max_per_page)
        page = int(req.args.get("page", 1))
        last = max(1, -(-len(items) // per))
        chunk = items[(page - 1) * per: page * per]
        base = f"{self.api_url}/repos/{repo}/issues/{number}/comments"
        links = []
        if page < last:
            links.append(f'<{base}?per_page={per}&page={page + 1}>; rel="next"')
            links.append(f'<{base}?per_page={per}&page={last}>; rel="last"')
        if page > 1:
            links.append(f'<{base}?per_page={per}&page=1>; rel="first"')
            links.append(f'<{base}?per_page={per}&page={page - 1}>; rel="prev"')
        headers = {"Link": ", ".join(links)} if links else {}
        return self._json([self._public(c) for c in chunk], headers=headers)
