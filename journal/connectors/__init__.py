"""Connectors: recognise which SaaS API a call belongs to and whether it reads or writes.

    from journal.connectors import Registry
    registry = Registry.builtin().with_file("connectors.toml")   # the file is optional
    registry.match("gmail.googleapis.com", "/gmail/v1/users/me/messages")      # -> "gmail"
    registry.classify("POST", "https://slack.com/api/conversations.history", headers, body)
    # -> Classification(connector="slack", effect="read", rule="slack method conversations.history")

One module per connector (gmail, calendar, drive, slack, github, graph), listed in
`registry.BUILTIN_MODULES`; `graphql` types GraphQL operations; `_http` and `_google` hold
what several connectors share (`effect_of_method`, the rule for a call no connector knows, is
exported for the Recorder). docs/connectors.md describes the module interface, the TOML
format and how to add a connector.
"""

from ._http import effect_of_method, lower_headers
from .registry import BUILTIN_MODULES, Classification, Registry

OTHER = "other"
"""The connector name of a call to a host no connector knows (recorded by default; effect by the method
rule, `effect_basis: default`)."""

__all__ = ["BUILTIN_MODULES", "OTHER", "Classification", "Registry", "effect_of_method", "lower_headers"]
