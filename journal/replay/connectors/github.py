"""GitHub REST (issues, comments, labels, reactions, pulls, contents) and GraphQL mutations.

Anything else falls back to the generic REST rules. GHES (`{host}/api/v3/...`) is handled by
keeping the `/api/v3` prefix when building calls.

Keys: issue `(owner, repo, number)`, pull `(owner, repo, number)`, comment `(owner, repo, id)`
(parent: its issue), reaction `(owner, repo, "issue"|"comment", n, id)`, file contents
`(owner, repo, ref, path)`, GraphQL node `(node id)`.

Inverses (connectors reference, GitHub): issue create -> close it as not planned (REST cannot
delete an issue: approximate); issue/pull PATCH -> PATCH the changed fields back; comment create
-> DELETE; comment PATCH -> PATCH the before body; comment DELETE -> create it again (new id);
labels: add -> PUT the before set (blind: the response's set minus the added labels,
approximate), remove one -> add it again, PUT -> PUT the before set; reaction create -> DELETE it
(HTTP 200 means it already existed: nothing changed); pull create -> close; merge -> irreversible,
compensation the GraphQL `revertPullRequest` (opens a revert PR); contents PUT create -> DELETE
with the new blob sha; PUT update -> PUT the before content; DELETE -> PUT the before content (a new
commit either way; history is not erased). GraphQL mutations: add/remove, close/reopen,
lock/unlock, resolve/unresolve pairs swap; addComment -> deleteIssueComment; createIssue ->
closeIssue; mergePullRequest -> revertPullRequest (approximate).
"""

from __future__ import annotations

from journal.connectors import github as capture

from ..model import (
    CREATED,
    DELETED,
    READ,
    WRITE,
    Call,
    Inverse,
    Request,
    Touch,
    Write,
    approx,
    exact,
    irreversible,
    json_value,
    no_inverse,
    url,
)

NAME = "github"

SWAP_MUTATIONS = {
    "addReaction": ("removeReaction", ("subjectId", "content")),
    "removeReaction": ("addReaction", ("subjectId", "content")),
    "addStar": ("removeStar", ("starrableId",)),
    "removeStar": ("addStar", ("starrableId",)),
    "closeIssue": ("reopenIssue", ("issueId",)),
    "reopenIssue": ("closeIssue", ("issueId",)),
    "closePullRequest": ("reopenPullRequest", ("pullRequestId",)),
    "reopenPullRequest": ("closePullRequest", ("pullRequestId",)),
    "addLabelsToLabelable": ("removeLabelsFromLabelable", ("labelableId", "labelIds")),
    "removeLabelsFromLabelable": ("addLabelsToLabelable", ("labelableId", "labelIds")),
    "lockLockable": ("unlockLockable", ("lockableId",)),
    "unlockLockable": ("lockLockable", ("lockableId",)),
    "resolveReviewThread": ("unresolveReviewThread", ("threadId",)),
    "unresolveReviewThread": ("resolveReviewThread", ("threadId",)),
    "markPullRequestReadyForReview": ("convertPullRequestToDraft", ("pullRequestId",)),
    "convertPullRequestToDraft": ("markPullRequestReadyForReview", ("pullRequestId",)),
}
_NODE_ID_FIELDS = ("subjectId", "starrableId", "issueId", "pullRequestId", "labelableId", "lockableId", "threadId",
                   "id")


def _names(items: object, field: str) -> list[str]:
    return [x[field] if isinstance(x, dict) else x for x in (items if isinstance(items, list) else [])
            if isinstance(x, str) or (isinstance(x, dict) and isinstance(x.get(field), str))]


def failure(call: Call) -> str | None:
    res = call.result
    if capture.api_path(call.path) in ("/graphql", "/graphql/") and isinstance(res, dict) and res.get("errors"):
        data = res.get("data")
        if not isinstance(data, dict) or not any(v is not None for v in data.values()):
            first = res["errors"][0] if isinstance(res["errors"], list) and res["errors"] else {}
            return f"GraphQL error: {first.get('message', '?') if isinstance(first, dict) else first}"
    return None


def touches(call: Call) -> list[Touch] | None:
    if call.tool is not None or not call.origin:
        return None
    path = capture.api_path(call.path)
    prefix = capture.GHES_REST_PREFIX if call.path.startswith(capture.GHES_REST_PREFIX + "/") else ""
    data: dict = {"base": call.origin + prefix}
    if path in ("/graphql", "/graphql/"):
        if call.effect == READ:
            return []
        gql_base = call.origin + ("/api/graphql" if call.path.startswith("/api/") else "/graphql")
        return _graphql(call, gql_base)
    segs = path.strip("/").split("/")
    if len(segs) < 4 or segs[0] != "repos":
        return None
    o, r, rest = segs[1], segs[2], segs[3:]
    data |= {"owner": o, "repo": r}
    res, args, m = call.result, call.args, call.method
    res_d = res if isinstance(res, dict) else {}

    def issue(n: str) -> tuple[str, ...]:
        return (NAME, "issue", o, r, n)

    def pull(n: str) -> tuple[str, ...]:
        return (NAME, "pull", o, r, n)

    def comment(cid: str) -> tuple[str, ...]:
        return (NAME, "comment", o, r, cid)

    def parent_of(c: dict) -> tuple[str, ...] | None:
        n = str(c.get("issue_url", "")).rstrip("/").rpartition("/")[2]
        return issue(n) if n.isdigit() else None

    # /repos/{o}/{r}/issues[/...]
    if rest[0] == "issues":
        if len(rest) == 1:
            return _numbered_collection(issue, "issues", m, res, res_d, args, data)
        if rest[1] == "comments" and len(rest) >= 3:
            cid = rest[2]
            if len(rest) == 3:
                if m == "GET":
                    return [Touch(comment(cid), READ, "issues.getComment", state=res_d or None, parent=parent_of(res_d),
                                  data=data)]
                if m == "PATCH":
                    return [Touch(comment(cid), WRITE, "issues.updateComment", state=res_d or None,
                                  intended=args or None, parent=parent_of(res_d), data=data | {"args": args})]
                if m == "DELETE":
                    return [Touch(comment(cid), WRITE, "issues.deleteComment", lifecycle=DELETED, data=data)]
            if len(rest) >= 4 and rest[3] == "reactions":
                return _reaction(call, (o, r, "comment", cid), comment(cid), rest[4:], data, res_d)
            return None
        n = rest[1]
        if not n.isdigit():
            return None
        if len(rest) == 2:
            if m == "GET":
                return [Touch(issue(n), READ, "issues.get", state=res_d or None, data=data)]
            if m == "PATCH":
                return [Touch(issue(n), WRITE, "issues.update", state=res_d or None, intended=_issue_intended(args),
                              data=data | {"args": args})]
            return None
        if rest[2] == "comments" and len(rest) == 3:
            if m == "GET":
                return [Touch(comment(str(c["id"])), READ, "issues.listComments", state=c, parent=issue(n), data=data)
                        for c in (res if isinstance(res, list) else []) if isinstance(c, dict)
                        and isinstance(c.get("id"), int)]
            if m == "POST" and isinstance(res_d.get("id"), int):
                return [Touch(comment(str(res_d["id"])), WRITE, "issues.createComment", state=res_d,
                              intended=args or None, lifecycle=CREATED, parent=issue(n), data=data)]
            return None
        if rest[2] == "labels":
            return _labels(call, issue(n), rest[3:], data, res)
        if rest[2] == "reactions":
            return _reaction(call, (o, r, "issue", n), issue(n), rest[3:], data, res_d)
        return None
    if rest[0] == "pulls":
        if len(rest) == 1:
            return _numbered_collection(pull, "pulls", m, res, res_d, args, data)
        n = rest[1]
        if not n.isdigit():
            return None
        if len(rest) == 2:
            if m == "GET":
                return [Touch(pull(n), READ, "pulls.get", state=res_d or None, data=data)]
            if m == "PATCH":
                return [Touch(pull(n), WRITE, "pulls.update", state=res_d or None, intended=args or None,
                              data=data | {"args": args})]
        if len(rest) == 3 and rest[2] == "merge" and m == "PUT":
            return [Touch(pull(n), WRITE, "pulls.merge", state={"merged": res_d.get("merged"),
                                                                 "merge_commit_sha": res_d.get("sha")},
                          lifecycle="merged", differences=[], data=data)]
        return None
    if rest[0] == "contents" and len(rest) >= 2:
        file_path = "/".join(rest[1:])
        ref = call.q("ref") or (args.get("branch") if isinstance(args.get("branch"), str) else None) or "(default)"
        key = (NAME, "file", o, r, ref, file_path)
        data |= {"path": rest[1:], "branch": None if ref == "(default)" else ref}
        if m == "GET":
            return [Touch(key, READ, "repos.getContent", state=res_d or None, data=data)] if res_d else []
        content = res_d.get("content") if isinstance(res_d.get("content"), dict) else None
        if m == "PUT":
            created = call.status == 201
            return [Touch(key, WRITE, "repos.createOrUpdateFileContents", state=content,
                          lifecycle=CREATED if created else None, differences=[],
                          data=data | {"new_sha": (content or {}).get("sha"), "message": args.get("message")})]
        if m == "DELETE":
            return [Touch(key, WRITE, "repos.deleteFile", lifecycle=DELETED, data=data)]
    return None


def _issue_intended(args: dict) -> dict | None:
    return {k: v for k, v in args.items() if k not in ("labels", "assignees", "milestone", "assignee")} or None


def _labels(call: Call, key: tuple, rest: list[str], data: dict, res: object) -> list[Touch] | None:
    m = call.method
    after = {"labels": res} if isinstance(res, list) else None
    if not rest:
        if m == "GET":
            return [Touch(key, READ, "issues.listLabelsOnIssue", state=after, data=data)]
        raw = json_value(call.request_body)
        asked = raw.get("labels") if isinstance(raw, dict) else raw
        names = _names(asked, "name") if isinstance(asked, list) else []
        if m in ("POST", "PUT"):
            op = "issues.addLabels" if m == "POST" else "issues.setLabels"
            return [Touch(key, WRITE, op, state=after, differences=[], data=data | {"labels": names})]
        if m == "DELETE":
            return [Touch(key, WRITE, "issues.removeAllLabels", data=data)]
        return None
    if m == "DELETE":
        return [Touch(key, WRITE, "issues.removeLabel", state=after, differences=[], data=data | {"labels": [rest[0]]})]
    return None


def _reaction(call: Call, where: tuple, parent: tuple, rest: list[str], data: dict, res: dict) -> list[Touch] | None:
    key_base = (NAME, "reaction", *where)
    if not rest and call.method == "POST" and isinstance(res.get("id"), int):
        existed = call.status == 200
        return [Touch((*key_base, str(res["id"])), WRITE, "reactions.create", state=res, differences=[],
                      lifecycle=None if existed else CREATED, parent=parent, data=data | {"existed": existed})]
    if len(rest) == 1 and call.method == "DELETE":
        return [Touch((*key_base, rest[0]), WRITE, "reactions.delete", lifecycle=DELETED, parent=parent, data=data)]
    if not rest and call.method == "GET" and isinstance(call.result, list):
        return [Touch((*key_base, str(x["id"])), READ, "reactions.list", state=x, parent=parent, data=data)
                for x in call.result if isinstance(x, dict) and isinstance(x.get("id"), int)]
    return None


def _graphql(call: Call, endpoint: str) -> list[Touch]:
    body = call.args
    query = body.get("query")
    if not isinstance(query, str):
        call.notes.append("GraphQL write without a readable query (persisted or batched): nothing to key")
        return []
    try:
        from graphql import FieldNode, OperationDefinitionNode, parse
        from graphql.utilities import value_from_ast_untyped

        doc = parse(query)
    except Exception as exc:  # noqa: BLE001 - graphql-core raises GraphQLError and friends
        call.notes.append(f"GraphQL document does not parse ({type(exc).__name__})")
        return []
    ops = [d for d in doc.definitions if isinstance(d, OperationDefinitionNode)]
    name = body.get("operationName")
    op = next((d for d in ops if d.name is not None and d.name.value == name), None) if name else (
        ops[0] if len(ops) == 1 else None)
    if op is None or op.operation.value != "mutation":
        call.notes.append("GraphQL write: no single mutation operation to replay")
        return []
    variables = got if isinstance(got := body.get("variables"), dict) else {}
    data_out = got if isinstance(got := call.result_dict.get("data"), dict) else {}
    out = []
    for sel in op.selection_set.selections:
        if not isinstance(sel, FieldNode):  # a fragment at a mutation's top level names no mutation
            continue
        mutation = sel.name.value
        alias = sel.alias.value if sel.alias else mutation
        inputs = {}
        for arg in sel.arguments or ():
            inputs[arg.name.value] = value_from_ast_untyped(arg.value, variables)
        inp = got if isinstance(got := inputs.get("input"), dict) else inputs
        node = next((str(inp[k]) for k in _NODE_ID_FIELDS if isinstance(inp.get(k), str)), None)
        answer = got if isinstance(got := data_out.get(alias), dict) else {}
        out.append(Touch((NAME, "node", node or f"({mutation})"), WRITE, mutation, state=None, differences=[],
                         data={"endpoint": endpoint, "input": inp, "answer": answer}))
    return out


def _mutation(name: str, inp: dict) -> dict:
    type_name = name[:1].upper() + name[1:] + "Input"
    return {"query": f"mutation($input: {type_name}!) {{ {name}(input: $input) {{ clientMutationId }} }}",
            "variables": {"input": inp}}


def _dig(value: object, *path: str) -> object:
    for p in path:
        if not isinstance(value, dict):
            return None
        value = value.get(p)
    return value


def invert(w: Write) -> Inverse:
    t, before, data = w.touch, w.before, w.touch.data
    base, o, r = data.get("base", ""), data.get("owner", ""), data.get("repo", "")
    seqs = ", ".join(str(s) for s in w.before_seqs) or "?"
    op = t.op
    if t.kind == "node":
        return _invert_graphql(w)
    if t.kind == "issue":
        n = t.key[-1]
        target = url(base, "repos", o, r, "issues", n)
        if op == "issues.create":
            return approx(Request("PATCH", target, {"state": "closed", "state_reason": "not_planned"}),
                          "REST cannot delete an issue (GraphQL deleteIssue needs admin); closing it as not "
                          "planned is the closest compensation")
        if op == "issues.update":
            args = data.get("args") or {}
            if before is None:
                if args.get("state") == "closed":
                    return approx(Request("PATCH", target, {"state": "open"}),
                                  "blind issues.update: reopening undoes the close; other changed fields have no "
                                  "captured before value", blind=True)
                return no_inverse("blind issues.update: no earlier read captured the issue")
            return exact(Request("PATCH", target, {k: _issue_field(before, k) for k in sorted(args)}),
                         f"patch the changed fields back to what seq {seqs} showed")
        if op in ("issues.addLabels", "issues.setLabels", "issues.removeLabel", "issues.removeAllLabels"):
            return _invert_labels(w, url(base, "repos", o, r, "issues", n, "labels"))
    if t.kind == "pull":
        n = t.key[-1]
        target = url(base, "repos", o, r, "pulls", n)
        if op == "pulls.create":
            return approx(Request("PATCH", target, {"state": "closed"}),
                          "a pull request cannot be deleted; closing it is the closest compensation")
        if op == "pulls.update":
            if before is None:
                return no_inverse("blind pulls.update: no earlier read captured the pull request")
            args = data.get("args") or {}
            return exact(Request("PATCH", target, {k: _issue_field(before, k) for k in sorted(args)}),
                         f"patch the changed fields back to what seq {seqs} showed")
        if op == "pulls.merge":
            node = (before or {}).get("node_id")
            comp = None
            if isinstance(node, str):
                comp = Request("POST", url(base, "graphql") if "/api/v3" not in base else
                               base.replace("/api/v3", "/api/graphql"),
                               _mutation("revertPullRequest", {"pullRequestId": node}))
            return irreversible("a merge cannot be undone; the compensation opens a revert pull request (GraphQL "
                                "revertPullRequest)" + ("" if comp else "; the PR's node_id was never read"), comp)
    if t.kind == "comment":
        cid = t.key[-1]
        target = url(base, "repos", o, r, "issues", "comments", cid)
        if t.lifecycle == CREATED:
            return exact(Request("DELETE", target), "delete the comment the write created")
        if op == "issues.updateComment":
            if before is None or "body" not in before:
                return no_inverse("blind comment edit: no earlier read captured its body", blind=True)
            return exact(Request("PATCH", target, {"body": before["body"]}), f"put back the body seen in seq {seqs}")
        if t.lifecycle == DELETED:
            n = str((before or {}).get("issue_url", "")).rstrip("/").rpartition("/")[2]
            if not before or "body" not in before or not n.isdigit():
                return irreversible("a deleted comment cannot be restored, and its body was never read")
            return irreversible("a deleted comment cannot be restored; the compensation posts its body again (new "
                                "id, new time, current author)",
                                Request("POST", url(base, "repos", o, r, "issues", n, "comments"),
                                        {"body": before["body"]}))
    if t.kind == "reaction":
        where, n, rid = t.key[4], t.key[5], t.key[6]
        parts = ("issues", n) if where == "issue" else ("issues", "comments", n)
        if data.get("existed"):
            return no_inverse("the reaction already existed (HTTP 200): nothing changed, nothing to undo")
        if t.lifecycle == CREATED:
            return exact(Request("DELETE", url(base, "repos", o, r, *parts, "reactions", rid)),
                         "delete the reaction the write created")
        if t.lifecycle == DELETED:
            content = (before or {}).get("content")
            if not isinstance(content, str):
                return no_inverse("blind reaction delete: which reaction it was was never read", blind=True)
            return approx(Request("POST", url(base, "repos", o, r, *parts, "reactions"), {"content": content}),
                          "add the reaction again (new id)")
    if t.kind == "file":
        return _invert_contents(w)
    return no_inverse(f"no inverse known for github {op}")


def _issue_field(before: dict, k: str) -> object:
    v = before.get(k)
    if k == "labels":
        return _names(v, "name")
    if k == "assignees":
        return _names(v, "login")
    if k == "assignee":
        return v.get("login") if isinstance(v, dict) else None
    if k == "milestone":
        return v.get("number") if isinstance(v, dict) else None
    if k == "base":
        return v.get("ref") if isinstance(v, dict) else v
    return v


def _invert_labels(w: Write, target: str) -> Inverse:
    t, before = w.touch, w.before
    asked = t.data.get("labels") or []
    before_names = _names(before.get("labels"), "name") if before and "labels" in before else None
    after = _names((t.state or {}).get("labels"), "name") if t.state else None
    if t.op == "issues.removeLabel":
        return exact(Request("POST", target, {"labels": asked}),
                     "add the label again (GitHub answers 404 when the label was not there, so it was)")
    if before_names is not None:
        return exact(Request("PUT", target, {"labels": before_names}),
                     f"put back the labels seen in seq {', '.join(str(s) for s in w.before_seqs)}")
    if t.op == "issues.addLabels" and after is not None:
        return approx(Request("PUT", target, {"labels": [x for x in after if x not in asked]}),
                      "blind label add: the response's labels minus the added ones; wrong if one of them was "
                      "already there", blind=True)
    return no_inverse(f"blind {t.op}: the labels the issue had were never read", blind=True)


def _invert_contents(w: Write) -> Inverse:
    t, before, data = w.touch, w.before, w.touch.data
    base, o, r = data.get("base", ""), data.get("owner", ""), data.get("repo", "")
    target = url(base, "repos", o, r, "contents", *data.get("path", []))
    branch = {"branch": data["branch"]} if data.get("branch") else {}
    if t.lifecycle == CREATED:
        sha = data.get("new_sha")
        if not sha:
            return no_inverse("the response names no blob sha to delete")
        return exact(Request("DELETE", target, {"message": "Revert: remove the file the agent created",
                                                 "sha": sha} | branch),
                     "delete the created file (a new commit; history keeps both)")
    content = (before or {}).get("content")
    if not isinstance(content, str) or (before or {}).get("encoding") not in (None, "base64"):
        return no_inverse("no earlier GET of the contents captured the file's base64 content", blind=True)
    body = {"message": "Revert: restore the file as it was", "content": "".join(content.split())} | branch
    if t.lifecycle == DELETED:
        return exact(Request("PUT", target, body), "create the file again with the content read before (a new "
                                                    "commit)")
    if data.get("new_sha"):
        body["sha"] = data["new_sha"]
    return exact(Request("PUT", target, body), "put back the content read before (a new commit)")


def _invert_graphql(w: Write) -> Inverse:
    t = w.touch
    inp, answer, endpoint, mutation = t.data.get("input") or {}, t.data.get("answer") or {}, t.data["endpoint"], t.op
    if mutation in SWAP_MUTATIONS:
        other, keep = SWAP_MUTATIONS[mutation]
        body = {k: inp[k] for k in keep if k in inp}
        if len(body) != len(keep):
            return no_inverse(f"{mutation}: the input lacks {', '.join(k for k in keep if k not in inp)}")
        return exact(Request("POST", endpoint, _mutation(other, body)), f"{other} with the same input")
    if mutation == "addComment":
        cid = _dig(answer, "commentEdge", "node", "id")
        if not isinstance(cid, str):
            return no_inverse("addComment: the mutation did not select the new comment's id, so it cannot be named")
        return exact(Request("POST", endpoint, _mutation("deleteIssueComment", {"id": cid})),
                     "delete the comment the mutation added")
    if mutation == "createIssue":
        iid = _dig(answer, "issue", "id")
        if not isinstance(iid, str):
            return no_inverse("createIssue: the mutation did not select the new issue's id")
        close = _mutation("closeIssue", {"issueId": iid, "stateReason": "NOT_PLANNED"})
        return approx(Request("POST", endpoint, close), "close the created issue (deleting needs admin)")
    if mutation == "mergePullRequest":
        pid = inp.get("pullRequestId")
        comp = Request("POST", endpoint, _mutation("revertPullRequest", {"pullRequestId": pid})) if isinstance(
            pid, str) else None
        return irreversible("a merge cannot be undone; revertPullRequest opens a revert pull request", comp)
    if mutation == "createCommitOnBranch":
        return irreversible("a commit cannot be removed from history through the API; revert it with a new commit")
    if mutation.startswith("delete"):
        return irreversible(f"{mutation} cannot be undone through the API")
    return no_inverse(f"GraphQL {mutation}: replay knows no inverse (updates need before values replay does not map "
                      "from GraphQL reads)")


def describe(kind: str, key: tuple, state: dict) -> str | None:
    if kind in ("issue", "pull") and isinstance(state.get("title"), str):
        return state["title"]
    if kind == "comment" and isinstance(state.get("body"), str):
        return state["body"]
    if kind == "reaction" and isinstance(state.get("content"), str):
        return state["content"]
    return None


def _numbered_collection(key, name: str, m: str, res, res_d: dict, args, data) -> list[Touch] | None:
    """GET lists issues or pulls (each read by its number); POST creates one, numbered in the response."""
    if m == "GET":
        return [Touch(key(str(x["number"])), READ, f"{name}.list", state=x, data=data)
                for x in res or [] if isinstance(x, dict) and isinstance(x.get("number"), int)]
    if m == "POST" and isinstance(res_d.get("number"), int):
        return [Touch(key(str(res_d["number"])), WRITE, f"{name}.create", state=res_d, intended=args or None,
                      lifecycle=CREATED, data=data)]
    return None
