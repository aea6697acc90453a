"""Fake GitHub: REST issues/comments/labels, ``POST /graphql`` and the OAuth token endpoint.

Why: the broker must type GraphQL operations (query vs mutation) and derive inverses from REST issue
writes; both need an upstream whose state changes and whose answers look like GitHub's.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import re
import threading
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import graphql
from graphql.language import ast as gql

from .common import (
    GITHUB_HOSTS,
    HttpError,
    Request,
    Response,
    Route,
    empty_response,
    int_param,
    json_response,
    rfc3339,
    route,
)

API = frozenset({"api.github.com"})
WEB = frozenset({"github.com"})
OWNER = "acme"
REPO = "widgets"
VIEWER = "octocat"
REPO_NODE_ID = "R_kgDOFakeRepo1"


def _ts() -> str:
    return rfc3339(millis=False)


def _user(login: str, uid: int) -> dict[str, Any]:
    return {
        "login": login,
        "id": uid,
        "node_id": base64.b64encode(f"04:User{uid}".encode()).decode(),
        "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
        "gravatar_id": "",
        "url": f"https://api.github.com/users/{login}",
        "html_url": f"https://github.com/{login}",
        "type": "User",
        "site_admin": False,
    }


USERS = {VIEWER: _user(VIEWER, 583231), "hubot": _user("hubot", 480938)}
LABEL_COLORS = {"bug": "d73a4a", "documentation": "0075ca", "enhancement": "a2eeef", "question": "d876e3"}


class GitHubState:
    """Repositories (owner, name) -> issues and comments."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._ids = itertools.count(2900000001)
        self.repos: dict[tuple[str, str], dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}  # comment id -> comment (with _repo, _issue)
        self.nodes: dict[
            str, tuple[str, Any]
        ] = {}  # node id -> ("issue", (repo key, number)) | ("comment", id)
        self.add_repo(OWNER, REPO, REPO_NODE_ID)
        self.create_issue(
            (OWNER, REPO), "Widget crashes on empty input", "Steps to reproduce:\n1. ...", ["bug"], "hubot"
        )
        self.create_issue(
            (OWNER, REPO), "Document the config file", "We need docs.", ["documentation"], VIEWER
        )
        self.add_comment((OWNER, REPO), 1, "I can reproduce this on main.", VIEWER)

    def add_repo(self, owner: str, name: str, node_id: str) -> None:
        """Create an empty repository."""
        self.repos[(owner, name)] = {
            "id": next(self._ids),
            "node_id": node_id,
            "owner": owner,
            "name": name,
            "issues": {},
            "next_number": 1,
        }
        self.nodes[node_id] = ("repo", (owner, name))

    def create_issue(
        self,
        key: tuple[str, str],
        title: str,
        body: str | None,
        labels: list[str],
        login: str = VIEWER,
        assignees: list[str] | None = None,
    ) -> dict[str, Any]:
        """Create an issue and return it (REST shape)."""
        repo = self.repos[key]
        n = repo["next_number"]
        repo["next_number"] += 1
        o, r = key
        base = f"https://api.github.com/repos/{o}/{r}/issues/{n}"
        now = _ts()
        iid = next(self._ids)
        node_id = "I_kwDO" + base64.b64encode(f"{o}/{r}#{n}".encode()).decode().rstrip("=")
        issue = {
            "url": base,
            "repository_url": f"https://api.github.com/repos/{o}/{r}",
            "labels_url": base + "/labels{/name}",
            "comments_url": base + "/comments",
            "events_url": base + "/events",
            "html_url": f"https://github.com/{o}/{r}/issues/{n}",
            "id": iid,
            "node_id": node_id,
            "number": n,
            "title": title,
            "user": copy.deepcopy(USERS.get(login, USERS[VIEWER])),
            "labels": [self.label(key, name) for name in labels],
            "state": "open",
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": 0,
            "created_at": now,
            "updated_at": now,
            "closed_at": None,
            "author_association": "OWNER",
            "active_lock_reason": None,
            "body": body,
            "closed_by": None,
            "timeline_url": base + "/timeline",
            "performed_via_github_app": None,
            "state_reason": None,
            "reactions": {
                "url": base + "/reactions",
                "total_count": 0,
                "+1": 0,
                "-1": 0,
                "laugh": 0,
                "hooray": 0,
                "confused": 0,
                "heart": 0,
                "rocket": 0,
                "eyes": 0,
            },
        }
        self.set_assignees(issue, assignees or [])
        repo["issues"][n] = issue
        self.nodes[node_id] = ("issue", (key, n))
        return issue

    def label(self, key: tuple[str, str], name: str) -> dict[str, Any]:
        """A Label object."""
        digest = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
        return {
            "id": digest,
            "node_id": "LA_kwDO" + base64.b64encode(name.encode()).decode().rstrip("="),
            "url": f"https://api.github.com/repos/{key[0]}/{key[1]}/labels/{urllib.parse.quote(name)}",
            "name": name,
            "color": LABEL_COLORS.get(name, "ededed"),
            "default": name in LABEL_COLORS,
            "description": None,
        }

    def set_assignees(self, issue: dict[str, Any], logins: list[str]) -> None:
        """Replace the assignees."""
        issue["assignees"] = [copy.deepcopy(USERS.get(x) or _user(x, 100000 + len(x))) for x in logins]
        issue["assignee"] = issue["assignees"][0] if issue["assignees"] else None

    def add_comment(
        self, key: tuple[str, str], number: int, body: str, login: str = VIEWER
    ) -> dict[str, Any]:
        """Comment on an issue."""
        issue = self.repos[key]["issues"][number]
        cid = next(self._ids)
        o, r = key
        now = _ts()
        node_id = "IC_kwDO" + base64.b64encode(f"comment{cid}".encode()).decode().rstrip("=")
        comment = {
            "url": f"https://api.github.com/repos/{o}/{r}/issues/comments/{cid}",
            "html_url": f"https://github.com/{o}/{r}/issues/{number}#issuecomment-{cid}",
            "issue_url": issue["url"],
            "id": cid,
            "node_id": node_id,
            "user": copy.deepcopy(USERS.get(login, USERS[VIEWER])),
            "created_at": now,
            "updated_at": now,
            "author_association": "OWNER",
            "body": body,
            "performed_via_github_app": None,
            "_repo": key,
            "_issue": number,
        }
        self.comments[cid] = comment
        self.nodes[node_id] = ("comment", cid)
        issue["comments"] += 1
        issue["updated_at"] = now
        return comment

    def delete_comment(self, cid: int) -> None:
        """Remove a comment."""
        comment = self.comments.pop(cid)
        self.nodes.pop(comment["node_id"], None)
        issue = self.repos[comment["_repo"]]["issues"].get(comment["_issue"])
        if issue is not None:
            issue["comments"] -= 1

    def edit_issue(
        self, issue: dict[str, Any], key: tuple[str, str], body: dict[str, Any], login: str = VIEWER
    ) -> None:
        """Apply a REST PATCH body to an issue."""
        for k in ("title", "body"):
            if k in body:
                issue[k] = body[k]
        if "labels" in body:
            issue["labels"] = [
                self.label(key, x if isinstance(x, str) else x.get("name", "")) for x in body["labels"]
            ]
        if "assignees" in body:
            self.set_assignees(issue, list(body["assignees"] or []))
        if "state" in body:
            state = body["state"]
            if state not in ("open", "closed"):
                raise HttpError(422, f"state must be open or closed, got {state}", "invalid")
            if state == "closed" and issue["state"] != "closed":
                issue["closed_at"] = _ts()
                issue["closed_by"] = copy.deepcopy(USERS.get(login, USERS[VIEWER]))
                issue["state_reason"] = body.get("state_reason") or "completed"
            elif state == "open" and issue["state"] != "open":
                issue["closed_at"] = None
                issue["closed_by"] = None
                issue["state_reason"] = "reopened"
            issue["state"] = state
        elif "state_reason" in body:
            issue["state_reason"] = body["state_reason"]
        issue["updated_at"] = _ts()


def _public_comment(c: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in c.items() if not k.startswith("_")}


def _validation_failed(resource: str, field: str, code: str = "missing_field") -> Response:
    return json_response(
        {
            "message": "Validation Failed",
            "errors": [{"resource": resource, "code": code, "field": field}],
            "documentation_url": "https://docs.github.com/rest/issues/issues#create-an-issue",
            "status": "422",
        },
        status=422,
        flavor="github",
    )


def _etagged(obj: Any, status: int = 200) -> Response:
    resp = json_response(obj, status=status, flavor="github")
    if status == 200:
        assert isinstance(resp.body, bytes)
        resp.headers.append(("ETag", f'W/"{hashlib.sha256(resp.body).hexdigest()[:40]}"'))
    return resp


class GitHub:
    """REST and GraphQL handlers bound to one GitHubState."""

    def __init__(self, st: GitHubState) -> None:
        self.st = st

    def _repo(self, m: re.Match[str]) -> tuple[tuple[str, str], dict[str, Any]]:
        key = (m.group("o").lower(), m.group("r").lower())
        repo = self.st.repos.get(key)
        if repo is None:
            raise HttpError(404, "Not Found")
        return key, repo

    def _issue(self, m: re.Match[str]) -> tuple[tuple[str, str], dict[str, Any]]:
        key, repo = self._repo(m)
        issue = repo["issues"].get(int(m.group("n")))
        if issue is None:
            raise HttpError(404, "Not Found")
        return key, issue

    def user(self, req: Request, m: re.Match[str]) -> Response:
        return _etagged(
            USERS[VIEWER] | {"name": "The Octocat", "email": "octocat@github.com", "public_repos": 8}
        )

    def get_repo(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            key, repo = self._repo(m)
            o, r = key
            return _etagged(
                {
                    "id": repo["id"],
                    "node_id": repo["node_id"],
                    "name": r,
                    "full_name": f"{o}/{r}",
                    "private": False,
                    "owner": USERS[VIEWER] | {"login": o},
                    "html_url": f"https://github.com/{o}/{r}",
                    "default_branch": "main",
                    "open_issues_count": sum(1 for i in repo["issues"].values() if i["state"] == "open"),
                }
            )

    def list_issues(self, req: Request, m: re.Match[str]) -> Response:
        state = req.query.get("state", "open")
        labels = [x for x in (req.query.get("labels") or "").split(",") if x]
        per_page = int_param(req, "per_page", 30, 1, 100)
        page_no = int_param(req, "page", 1, 1)
        with self.st.lock:
            key, repo = self._repo(m)
            issues = [
                copy.deepcopy(i)
                for i in sorted(repo["issues"].values(), key=lambda i: -i["number"])
                if (state == "all" or i["state"] == state)
                and all(any(lb["name"] == x for lb in i["labels"]) for x in labels)
            ]
        chunk = issues[(page_no - 1) * per_page : page_no * per_page]
        resp = _etagged(chunk)
        if page_no * per_page < len(issues):
            base = f"https://api.github.com/repos/{key[0]}/{key[1]}/issues?state={state}&per_page={per_page}"
            last = (len(issues) + per_page - 1) // per_page
            resp.headers.append(
                ("Link", f'<{base}&page={page_no + 1}>; rel="next", <{base}&page={last}>; rel="last"')
            )
        return resp

    def create_issue(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        title = body.get("title")
        if not isinstance(title, str | int) or title == "":
            return _validation_failed("Issue", "title")
        with self.st.lock:
            key, _ = self._repo(m)
            issue = self.st.create_issue(
                key,
                str(title),
                body.get("body"),
                [x for x in body.get("labels") or [] if isinstance(x, str)],
                assignees=[x for x in body.get("assignees") or [] if isinstance(x, str)],
            )
            resp = _etagged(copy.deepcopy(issue), status=201)
        resp.headers.append(("Location", issue["url"]))
        return resp

    def get_issue(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            _, issue = self._issue(m)
            return _etagged(copy.deepcopy(issue))

    def patch_issue(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            key, issue = self._issue(m)
            if "title" in body and not body["title"]:
                return _validation_failed("Issue", "title", "missing")
            self.st.edit_issue(issue, key, body)
            return _etagged(copy.deepcopy(issue))

    def list_comments(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            key, issue = self._issue(m)
            return _etagged(
                [
                    _public_comment(c)
                    for c in self.st.comments.values()
                    if c["_repo"] == key and c["_issue"] == issue["number"]
                ]
            )

    def create_comment(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        if not isinstance(body.get("body"), str) or not body["body"]:
            return _validation_failed("IssueComment", "body")
        with self.st.lock:
            key, issue = self._issue(m)
            comment = self.st.add_comment(key, issue["number"], body["body"])
            resp = _etagged(_public_comment(comment), status=201)
        resp.headers.append(("Location", comment["url"]))
        return resp

    def _comment(self, m: re.Match[str]) -> dict[str, Any]:
        key, _ = self._repo(m)
        comment = self.st.comments.get(int(m.group("cid")))
        if comment is None or comment["_repo"] != key:
            raise HttpError(404, "Not Found")
        return comment

    def get_comment(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            return _etagged(_public_comment(self._comment(m)))

    def patch_comment(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            comment = self._comment(m)
            if not isinstance(body.get("body"), str) or not body["body"]:
                return _validation_failed("IssueComment", "body")
            comment["body"] = body["body"]
            comment["updated_at"] = _ts()
            return _etagged(_public_comment(comment))

    def delete_comment(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            self.st.delete_comment(self._comment(m)["id"])
        return empty_response(204)

    def add_labels(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json(default={})
        names = body.get("labels", []) if isinstance(body, dict) else body
        with self.st.lock:
            key, issue = self._issue(m)
            have = {lb["name"] for lb in issue["labels"]}
            if req.method == "PUT":
                issue["labels"] = []
                have = set()
            for name in names or []:
                name = name if isinstance(name, str) else name.get("name", "")
                if name and name not in have:
                    issue["labels"].append(self.st.label(key, name))
                    have.add(name)
            issue["updated_at"] = _ts()
            return _etagged(copy.deepcopy(issue["labels"]))

    def remove_label(self, req: Request, m: re.Match[str]) -> Response:
        name = urllib.parse.unquote(m.group("name"))
        with self.st.lock:
            _, issue = self._issue(m)
            if not any(lb["name"] == name for lb in issue["labels"]):
                raise HttpError(404, "Label does not exist")
            issue["labels"] = [lb for lb in issue["labels"] if lb["name"] != name]
            return _etagged(copy.deepcopy(issue["labels"]))

    # -- GraphQL ---------------------------------------------------------------------------------------------

    def graphql(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json(default=None)
        if isinstance(body, list):
            return json_response(
                {"errors": [{"message": "Batched queries are not supported"}]}, flavor="github"
            )
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return json_response(
                {"errors": [{"message": "A query attribute must be specified and must be a string."}]},
                status=400,
                flavor="github",
            )
        try:
            doc = graphql.parse(body["query"])
        except graphql.GraphQLError as exc:
            locs = [{"line": loc.line, "column": loc.column} for loc in exc.locations or []]
            return json_response({"errors": [{"message": exc.message, "locations": locs}]}, flavor="github")
        ops = [d for d in doc.definitions if isinstance(d, gql.OperationDefinitionNode)]
        frags = {d.name.value: d for d in doc.definitions if isinstance(d, gql.FragmentDefinitionNode)}
        name = body.get("operationName")
        op = (
            next((o for o in ops if o.name and o.name.value == name), None)
            if name
            else (ops[0] if len(ops) == 1 else None)
        )
        if op is None:
            msg = (
                f"Unknown operation named '{name}'."
                if name
                else "Must provide operation name if query contains multiple operations."
            )
            return json_response({"errors": [{"message": msg}]}, flavor="github")
        ctx = _GqlContext(self.st, body.get("variables") or {}, frags)
        root = ctx.mutation_root() if op.operation == gql.OperationType.MUTATION else ctx.query_root()
        with self.st.lock:
            data = ctx.project(
                root, op.selection_set, "Mutation" if op.operation.value == "mutation" else "Query"
            )
        out: dict[str, Any] = {"data": data}
        if ctx.errors:
            out["errors"] = ctx.errors
        return json_response(out, flavor="github")

    # -- OAuth -----------------------------------------------------------------------------------------------

    def access_token(self, req: Request, m: re.Match[str]) -> Response:
        params = req.params()
        wants_json = "json" in (req.header("accept") or "")
        if not params.get("client_id"):
            result: dict[str, Any] = {
                "error": "incorrect_client_credentials",
                "error_description": "The client_id and/or client_secret passed are incorrect.",
            }
        elif not (params.get("code") or params.get("device_code") or params.get("refresh_token")):
            result = {
                "error": "bad_verification_code",
                "error_description": "The code passed is incorrect or expired.",
                "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access"
                "-token-request-errors/#bad-verification-code",
            }
        else:
            result = {
                "access_token": "gho_" + uuid.uuid4().hex[:36].ljust(36, "0"),
                "token_type": "bearer",
                "scope": "repo,read:user",
            }
        if wants_json:
            return json_response(result, flavor="github")
        return Response(
            status=200,
            body=urllib.parse.urlencode(result).encode(),
            content_type="application/x-www-form-urlencoded; charset=utf-8",
        )

    def device_code(self, req: Request, m: re.Match[str]) -> Response:
        req.params()
        result = {
            "device_code": uuid.uuid4().hex,
            "user_code": "WDJB-MJHT",
            "verification_uri": "https://github.com/login/device",
            "expires_in": 900,
            "interval": 5,
        }
        if "json" in (req.header("accept") or ""):
            return json_response(result, flavor="github")
        return Response(
            status=200,
            body=urllib.parse.urlencode(result).encode(),
            content_type="application/x-www-form-urlencoded; charset=utf-8",
        )


class _GqlContext:
    """Resolves a parsed operation against the state with plain dicts (values may be callables(args))."""

    def __init__(
        self, st: GitHubState, variables: dict[str, Any], frags: dict[str, gql.FragmentDefinitionNode]
    ):
        self.st = st
        self.variables = variables
        self.frags = frags
        self.errors: list[dict[str, Any]] = []

    def value(self, node: gql.ValueNode) -> Any:
        """An argument value (variables substituted)."""
        return graphql.value_from_ast_untyped(node, self.variables)

    def fields(self, sel: gql.SelectionSetNode | None) -> list[gql.FieldNode]:
        """Flatten fragments (type conditions are ignored: the fake has one type per position)."""
        out: list[gql.FieldNode] = []
        for s in sel.selections if sel else []:
            if isinstance(s, gql.FieldNode):
                out.append(s)
            elif isinstance(s, gql.InlineFragmentNode):
                out += self.fields(s.selection_set)
            elif isinstance(s, gql.FragmentSpreadNode) and s.name.value in self.frags:
                out += self.fields(self.frags[s.name.value].selection_set)
        return out

    def project(self, obj: Any, sel: gql.SelectionSetNode | None, typename: str) -> Any:
        """Shape ``obj`` like the selection set."""
        if obj is None:
            return None
        if isinstance(obj, list):
            return [self.project(x, sel, typename) for x in obj]
        if sel is None or not isinstance(obj, dict):
            return obj
        out: dict[str, Any] = {}
        for f in self.fields(sel):
            name = f.name.value
            key = f.alias.value if f.alias else name
            if name == "__typename":
                out[key] = obj.get("__typename", typename)
                continue
            if name not in obj:
                if typename in ("Query", "Mutation"):
                    self.errors.append(
                        {
                            "message": f"Field '{name}' doesn't exist on type '{typename}'",
                            "path": [key],
                            "extensions": {"code": "undefinedField"},
                        }
                    )
                out[key] = None
                continue
            val = obj[name]
            if callable(val):
                args = {a.name.value: self.value(a.value) for a in f.arguments or []}
                try:
                    val = val(args)
                except HttpError as exc:
                    self.errors.append(
                        {
                            "type": "NOT_FOUND" if exc.status == 404 else "UNPROCESSABLE",
                            "path": [key],
                            "message": exc.message,
                        }
                    )
                    val = None
            out[key] = self.project(val, f.selection_set, name[:1].upper() + name[1:])
        return out

    # -- object builders -------------------------------------------------------------------------------

    @staticmethod
    def connection(items: list[Any], args: dict[str, Any]) -> dict[str, Any]:
        """A Relay connection over ``items``."""
        first, last = args.get("first"), args.get("last")
        chosen = (
            items[: int(first)] if first is not None else items[-int(last) :] if last is not None else items
        )
        return {
            "totalCount": len(items),
            "nodes": chosen,
            "edges": [{"node": x, "cursor": f"Y3Vyc29y{i}"} for i, x in enumerate(chosen)],
            "pageInfo": {
                "hasNextPage": len(chosen) < len(items),
                "hasPreviousPage": False,
                "endCursor": f"Y3Vyc29y{len(chosen)}",
                "startCursor": "Y3Vyc29y0",
            },
        }

    def user(self, login: str) -> dict[str, Any]:
        """A GraphQL User."""
        u = USERS.get(login, USERS[VIEWER])
        return {
            "__typename": "User",
            "login": u["login"],
            "id": u["node_id"],
            "databaseId": u["id"],
            "url": u["html_url"],
            "avatarUrl": u["avatar_url"],
            "name": u["login"].title(),
        }

    def comment(self, c: dict[str, Any]) -> dict[str, Any]:
        """A GraphQL IssueComment."""
        return {
            "__typename": "IssueComment",
            "id": c["node_id"],
            "databaseId": c["id"],
            "body": c["body"],
            "url": c["html_url"],
            "createdAt": c["created_at"],
            "updatedAt": c["updated_at"],
            "author": self.user(c["user"]["login"]),
        }

    def issue(self, key: tuple[str, str], i: dict[str, Any]) -> dict[str, Any]:
        """A GraphQL Issue."""
        comments = [c for c in self.st.comments.values() if c["_repo"] == key and c["_issue"] == i["number"]]
        return {
            "__typename": "Issue",
            "id": i["node_id"],
            "databaseId": i["id"],
            "number": i["number"],
            "title": i["title"],
            "body": i["body"] or "",
            "state": i["state"].upper(),
            "stateReason": (i["state_reason"] or "").upper() or None,
            "closed": i["state"] == "closed",
            "url": i["html_url"],
            "createdAt": i["created_at"],
            "updatedAt": i["updated_at"],
            "closedAt": i["closed_at"],
            "author": self.user(i["user"]["login"]),
            "repository": lambda a: self.repository(key),
            "comments": lambda a: self.connection([self.comment(c) for c in comments], a),
            "labels": lambda a: self.connection(
                [
                    {"__typename": "Label", "id": lb["node_id"], "name": lb["name"], "color": lb["color"]}
                    for lb in i["labels"]
                ],
                a,
            ),
        }

    def repository(self, key: tuple[str, str]) -> dict[str, Any]:
        """A GraphQL Repository."""
        repo = self.st.repos[key]

        def issues(args: dict[str, Any]) -> dict[str, Any]:
            states = args.get("states") or ["OPEN", "CLOSED"]
            states = [states] if isinstance(states, str) else states
            found = [
                self.issue(key, i) for _, i in sorted(repo["issues"].items()) if i["state"].upper() in states
            ]
            return self.connection(found, args)

        def issue(args: dict[str, Any]) -> dict[str, Any] | None:
            i = repo["issues"].get(int(args.get("number", 0)))
            if i is None:
                raise HttpError(
                    404, f"Could not resolve to an Issue with the number of {args.get('number')}."
                )
            return self.issue(key, i)

        return {
            "__typename": "Repository",
            "id": repo["node_id"],
            "databaseId": repo["id"],
            "name": key[1],
            "nameWithOwner": f"{key[0]}/{key[1]}",
            "owner": {"__typename": "Organization", "login": key[0]},
            "url": f"https://github.com/{key[0]}/{key[1]}",
            "description": "Fake repository",
            "isPrivate": False,
            "defaultBranchRef": {"name": "main"},
            "issues": issues,
            "issue": issue,
            "pullRequests": lambda a: self.connection([], a),
        }

    def node(self, node_id: str) -> dict[str, Any] | None:
        """Resolve a global node id."""
        kind, ref = self.st.nodes.get(node_id, ("", None))
        if kind == "issue":
            key, n = ref
            return self.issue(key, self.st.repos[key]["issues"][n])
        if kind == "comment":
            return self.comment(self.st.comments[ref])
        if kind == "repo":
            return self.repository(ref)
        raise HttpError(404, f"Could not resolve to a node with the global id of '{node_id}'")

    def query_root(self) -> dict[str, Any]:
        """Root Query fields."""

        def repository(a: dict[str, Any]) -> dict[str, Any]:
            key = (str(a.get("owner", "")).lower(), str(a.get("name", "")).lower())
            if key not in self.st.repos:
                raise HttpError(404, f"Could not resolve to a Repository with the name '{key[0]}/{key[1]}'.")
            return self.repository(key)

        return {
            "viewer": self.user(VIEWER) | {"email": "octocat@github.com"},
            "repository": repository,
            "node": lambda a: self.node(str(a.get("id"))),
            "nodes": lambda a: [self.node(str(x)) for x in a.get("ids") or []],
            "user": lambda a: self.user(str(a.get("login"))),
            "rateLimit": {"limit": 5000, "cost": 1, "remaining": 4999, "used": 1, "resetAt": _ts()},
        }

    def _issue_by_node(self, node_id: Any) -> tuple[tuple[str, str], dict[str, Any]]:
        kind, ref = self.st.nodes.get(str(node_id), ("", None))
        if kind != "issue":
            raise HttpError(404, f"Could not resolve to a node with the global id of '{node_id}'")
        key, n = ref
        return key, self.st.repos[key]["issues"][n]

    def mutation_root(self) -> dict[str, Any]:
        """Root Mutation fields (stateful for issues and comments)."""

        def inp(a: dict[str, Any]) -> dict[str, Any]:
            return a.get("input") or {}

        def create_issue(a: dict[str, Any]) -> dict[str, Any]:
            i = inp(a)
            kind, key = self.st.nodes.get(str(i.get("repositoryId")), ("", None))
            if kind != "repo":
                raise HttpError(
                    404, f"Could not resolve to a node with the global id of '{i.get('repositoryId')}'"
                )
            issue = self.st.create_issue(key, str(i.get("title") or ""), i.get("body"), [])
            return {"issue": self.issue(key, issue), "clientMutationId": i.get("clientMutationId")}

        def state_change(state: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
            def run(a: dict[str, Any]) -> dict[str, Any]:
                i = inp(a)
                key, issue = self._issue_by_node(i.get("issueId"))
                body: dict[str, Any] = {"state": state}
                if i.get("stateReason"):
                    body["state_reason"] = str(i["stateReason"]).lower()
                self.st.edit_issue(issue, key, body)
                return {"issue": self.issue(key, issue), "clientMutationId": i.get("clientMutationId")}

            return run

        def update_issue(a: dict[str, Any]) -> dict[str, Any]:
            i = inp(a)
            key, issue = self._issue_by_node(i.get("id"))
            body = {k: i[k] for k in ("title", "body") if k in i}
            if "state" in i:
                body["state"] = str(i["state"]).lower()
            self.st.edit_issue(issue, key, body)
            return {"issue": self.issue(key, issue), "clientMutationId": i.get("clientMutationId")}

        def add_comment(a: dict[str, Any]) -> dict[str, Any]:
            i = inp(a)
            key, issue = self._issue_by_node(i.get("subjectId"))
            c = self.st.add_comment(key, issue["number"], str(i.get("body") or ""))
            node = self.comment(c)
            return {
                "commentEdge": {"node": node, "cursor": "Y3Vyc29y"},
                "subject": self.issue(key, issue),
                "timelineEdge": {"node": node},
                "clientMutationId": i.get("clientMutationId"),
            }

        def delete_comment(a: dict[str, Any]) -> dict[str, Any]:
            i = inp(a)
            kind, cid = self.st.nodes.get(str(i.get("id")), ("", None))
            if kind != "comment":
                raise HttpError(404, f"Could not resolve to a node with the global id of '{i.get('id')}'")
            self.st.delete_comment(cid)
            return {"clientMutationId": i.get("clientMutationId")}

        def reaction(a: dict[str, Any]) -> dict[str, Any]:
            i = inp(a)
            return {
                "reaction": {"content": i.get("content")},
                "subject": self.node(str(i.get("subjectId"))),
                "clientMutationId": i.get("clientMutationId"),
            }

        return {
            "createIssue": create_issue,
            "closeIssue": state_change("closed"),
            "reopenIssue": state_change("open"),
            "updateIssue": update_issue,
            "addComment": add_comment,
            "deleteIssueComment": delete_comment,
            "addReaction": reaction,
            "removeReaction": reaction,
        }


def routes(st: GitHubState) -> list[Route]:
    """GitHub routes on api.github.com and github.com."""
    g = GitHub(st)
    repo = r"/repos/(?P<o>[^/]+)/(?P<r>[^/]+)"
    issue = repo + r"/issues/(?P<n>\d+)"
    table = [
        ("GET", r"/user", g.user),
        ("GET", repo, g.get_repo),
        ("GET", repo + r"/issues", g.list_issues),
        ("POST", repo + r"/issues", g.create_issue),
        ("GET", repo + r"/issues/comments/(?P<cid>\d+)", g.get_comment),
        ("PATCH", repo + r"/issues/comments/(?P<cid>\d+)", g.patch_comment),
        ("DELETE", repo + r"/issues/comments/(?P<cid>\d+)", g.delete_comment),
        ("GET", issue, g.get_issue),
        ("PATCH", issue, g.patch_issue),
        ("GET", issue + r"/comments", g.list_comments),
        ("POST", issue + r"/comments", g.create_comment),
        ("POST PUT", issue + r"/labels", g.add_labels),
        ("DELETE", issue + r"/labels/(?P<name>[^/]+)", g.remove_label),
        ("POST", r"/graphql", g.graphql),
    ]
    out = [route(methods, API, pattern, handler, "github") for methods, pattern, handler in table]
    out += [
        route("POST", WEB, r"/login/oauth/access_token", g.access_token, "github", public=True),
        route("POST", WEB, r"/login/device/code", g.device_code, "github", public=True),
    ]
    assert API | WEB == GITHUB_HOSTS
    return out
