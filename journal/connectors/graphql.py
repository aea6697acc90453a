"""GraphQL operation typing: does a GraphQL request read or write?

The document is parsed with graphql-core (`graphql.parse`), never searched for keywords: a
comment or a string that says "mutation" changes nothing, and a document may hold several
operations plus fragments. The operation that runs is the one named by ``operationName``, or
the only operation in the document. Its type decides: ``mutation`` writes; ``query``, the
shorthand ``{ ... }`` and ``subscription`` read.

Fail closed (write): body not captured, not JSON, a batched JSON array, a persisted query
sent without its text (``extensions.persistedQuery``), a document that does not parse, an
``operationName`` that names no operation, or several operations and no ``operationName``.

graphql-core is imported on first use only, so importing the registry stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._http import READ, WRITE

# A bound on parser work for hostile documents; a bigger document is treated as a write.
MAX_TOKENS = 200_000

_parse: Any = None


def _parser() -> Any:
    global _parse
    if _parse is None:
        from graphql import parse  # graphql-core, the top-level package

        _parse = parse
    return _parse


def classify_document(document: str, operation_name: str | None) -> tuple[str, str]:
    """(effect, rule) for a GraphQL document and the operationName that selects what runs."""
    try:
        doc = _parser()(document, no_location=True, max_tokens=MAX_TOKENS)
    except Exception:  # GraphQLSyntaxError, or RecursionError on absurd nesting
        return WRITE, "graphql document does not parse"
    operations = [d for d in doc.definitions if d.kind == "operation_definition"]
    if operation_name:
        chosen = [op for op in operations if op.name is not None and op.name.value == operation_name]
        if len(chosen) != 1:
            return WRITE, "graphql operationName names no single operation"
        operation = chosen[0]
    elif len(operations) == 1:
        operation = operations[0]
    elif not operations:
        return WRITE, "graphql document has no operation"
    else:
        return WRITE, "graphql several operations and no operationName"
    kind = operation.operation.value  # "query", "mutation" or "subscription"
    return (WRITE if kind == "mutation" else READ), f"graphql {kind}"


def classify_body(body: bytes | None, content_type: str = "") -> tuple[str, str]:
    """(effect, rule) for the body of a GraphQL POST (JSON, or ``application/graphql`` text)."""
    if body is None:
        return WRITE, "graphql body not captured"
    if content_type.partition(";")[0].strip().lower() == "application/graphql":
        try:
            return classify_document(body.decode("utf-8"), None)
        except UnicodeDecodeError:
            return WRITE, "graphql document is not UTF-8"
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return WRITE, "graphql body is not JSON"
    return classify_payload(payload)


def classify_payload(payload: object) -> tuple[str, str]:
    """(effect, rule) for a decoded GraphQL-over-HTTP request object."""
    if isinstance(payload, list):
        return WRITE, "graphql batched array"
    if not isinstance(payload, dict):
        return WRITE, "graphql body is not an object"
    document = payload.get("query")
    if document is None:
        extensions = payload.get("extensions")
        if isinstance(extensions, dict) and "persistedQuery" in extensions:
            return WRITE, "graphql persisted query without its text"
        return WRITE, "graphql request without query"
    if not isinstance(document, str):
        return WRITE, "graphql query is not a string"
    operation_name = payload.get("operationName")
    if operation_name is not None and not isinstance(operation_name, str):
        return WRITE, "graphql operationName is not a string"
    return classify_document(document, operation_name)


def classify_query_string(query: dict[str, list[str]]) -> tuple[str, str] | None:
    """(effect, rule) for GraphQL over GET (``?query=...&operationName=...``); None when the
    query string carries no document."""
    documents = query.get("query")
    if not documents:
        return None
    names: Sequence[str | None] = query.get("operationName") or [None]
    if len(documents) != 1 or len(names) != 1:
        return WRITE, "graphql repeated query parameters"
    return classify_document(documents[0], names[0])
