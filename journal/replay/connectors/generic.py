"""The generic REST fallback: for connectors without their own replay module, and for calls a
connector module leaves to it (it returns None from `touches`).

A resource is a URL path (host + normalised path, no query). GET reads it: a JSON object answer is
its state, and a list of objects with an `id` (at the top or under `items`, `data`, `results`,
`values`) also shows each of them as the child `<path>/<id>`. POST to a collection creates a child
whose id comes from the response (`id`, else `key`, `uuid`); PUT, PATCH and DELETE act on the path.

Inverses: created child -> DELETE it; PUT -> PUT the before-state; PATCH -> PATCH each field the
request set back to its before value (null when it had none); DELETE -> PUT the before-state back
(approximate: many APIs cannot re-create at the same path). Without a before-state PUT, PATCH and
DELETE have no inverse. A POST whose answer names no id changed something the rules cannot name.
"""

from __future__ import annotations

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
    as_dict,
    changed_back,
    exact,
    no_inverse,
)

NAME = "generic"
ID_FIELDS = ("id", "key", "uuid")
LIST_FIELDS = ("items", "data", "results", "values")


def resource_path(call: Call) -> str:
    path = call.path
    return path.rstrip("/") if len(path) > 1 else path


def key_for(connector: str, host: str, path: str) -> tuple[str, ...]:
    return (connector, "resource", host + path)


def _id_of(obj: dict) -> str | None:
    for name in ID_FIELDS:
        v = obj.get(name)
        if isinstance(v, str | int) and not isinstance(v, bool) and str(v) and "/" not in str(v):
            return str(v)
    return None


def _listed(result: object) -> list[dict]:
    if isinstance(result, list):
        items = result
    elif isinstance(result, dict):
        items = next((result[k] for k in LIST_FIELDS if isinstance(result.get(k), list)), [])
    else:
        items = []
    return [x for x in items if isinstance(x, dict) and _id_of(x) is not None]


def touches(call: Call) -> list[Touch] | None:
    if call.tool is not None:
        call.notes.append(f"MCP tool call `{call.tool}`: no API resource is known for it")
        return []
    path = resource_path(call)
    key = key_for(call.connector, call.host, path)
    result = call.result
    state = as_dict(result) or None
    method = call.method
    data = {"path": path, "origin": call.origin}
    if call.effect == READ:
        out = [Touch(key, READ, f"{method} {path}", state=state if not isinstance(result, list) else None,
                     data=data)]
        for item in _listed(result):
            child = f"{path}/{_id_of(item)}"
            out.append(Touch(key_for(call.connector, call.host, child), READ, f"{method} {path}", state=item,
                             parent=key, data={"path": child, "origin": call.origin}))
        return out
    args = call.args or None
    if method == "POST":
        new_id = _id_of(state or {})
        if new_id is not None:
            child = f"{path}/{new_id}"
            return [Touch(key_for(call.connector, call.host, child), WRITE, f"POST {path}", state=state,
                          intended=args, lifecycle=CREATED, parent=key, data={"path": child, "origin": call.origin})]
        return [Touch(key, WRITE, f"POST {path}", state=state, intended=args, data=data | {"action": True})]
    if method == "DELETE":
        return [Touch(key, WRITE, f"DELETE {path}", lifecycle=DELETED, data=data)]
    lifecycle = CREATED if method == "PUT" and call.status == 201 else None
    return [Touch(key, WRITE, f"{method} {path}", state=state, intended=args, lifecycle=lifecycle,
                  data=data | {"args": call.args})]


def invert(w: Write) -> Inverse:
    t = w.touch
    target = t.data.get("origin", "") + t.data.get("path", "")
    method = w.call.method
    if t.lifecycle == CREATED:
        return exact(Request("DELETE", target), "delete what the write created (generic REST rule)")
    if t.data.get("action"):
        return no_inverse(f"POST to {t.data.get('path')} answered no id: the generic rules cannot tell what it "
                          "changed or how to undo it")
    if w.before is None:
        return no_inverse(f"blind {method}: no earlier entry read {t.data.get('path')}, so what it held before "
                          "is unknown")
    if method == "PUT":
        return exact(Request("PUT", target, w.before), "PUT the before-state back (generic REST rule)")
    if method == "PATCH":
        args = t.data.get("args") or {}
        if not args:
            return no_inverse("PATCH body is not a JSON object: nothing to patch back")
        return exact(Request("PATCH", target, changed_back(args, w.before)),
                     "PATCH each field the request set back to its before value (generic REST rule)")
    if method == "DELETE":
        return approx(Request("PUT", target, w.before),
                      "re-create from the before-state; many APIs do not allow a PUT to a deleted path "
                      "(generic REST rule)")
    return no_inverse(f"no generic inverse for {method}")
