"""The credential catalogue: what a credential looks like, kept as data (docs/secrets.md).

Why a catalogue: a hand list misses whatever its author never met. The shapes below come first from a
maintained source, detect-secrets (Yelp, Apache-2.0) at the version in ``CATALOGUE_SOURCE``: the
token regexes of its plugins and the names of its keyword detector, copied here as data (the package
is not imported: the broker imports this module in every command and must stay quick to start).
Beside them, marked ``broker``, the shapes we added (each has a test in tests/test_secret_shapes.py).

journal/redact.py builds its rules from these tuples; nothing here is compiled at import.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOGUE_SOURCE", "KEYWORD_NAMES", "PREFIX_SHAPES", "PrefixShape"]

CATALOGUE_SOURCE = "detect-secrets 1.5.0"
DS = CATALOGUE_SOURCE + ": detect_secrets/plugins/"


@dataclass(frozen=True, slots=True)
class PrefixShape:
    """A token known by a literal prefix.

    `rest` is the regex (bounded) the characters right after the prefix must match; the token's
    further characters (letters, digits, `_`, `-`, `+`, `/`) go with it. The prefix stays in the
    journal (`sk_live_[never captured]`): it names the kind of key, which an auditor wants, and is no
    secret. `sample` builds test samples: each `{n}` is n random characters of `alphabet`.
    """

    name: str
    source: str
    prefixes: tuple[str, ...]
    rest: str
    sample: str
    alphabet: str = "A-Za-z0-9"


PREFIX_SHAPES: tuple[PrefixShape, ...] = (
    # -- from detect-secrets -------------------------------------------------------------------
    PrefixShape("AWS access key id", DS + "aws.py", ("AKIA", "ASIA", "ABIA", "ACCA"), r"[0-9A-Z]{16}",
                "{16}", "0-9A-Z"),
    PrefixShape("GitLab token", DS + "gitlab_token.py",
                ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-"),
                r"[A-Za-z0-9_\-]{20}", "{24}", "A-Za-z0-9_-"),
    PrefixShape("GitLab runner registration token", DS + "gitlab_token.py", ("GR1348941",),
                r"[A-Za-z0-9_\-]{20}", "{24}", "A-Za-z0-9_-"),
    PrefixShape("OpenAI key (T3BlbkFJ marker)", DS + "openai.py", ("sk-",),
                r"(?=[A-Za-z0-9_\-]{0,200}T3BlbkFJ)[A-Za-z0-9_\-]{8}", "{20}T3BlbkFJ{20}"),
    PrefixShape("Stripe live key", DS + "stripe.py", ("sk_live_", "rk_live_"), r"[0-9a-zA-Z]{24}", "{24}"),
    PrefixShape("SendGrid key", DS + "sendgrid.py", ("SG.",), r"[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
                "{22}.{43}", "A-Za-z0-9_-"),
    PrefixShape("PyPI token", DS + "pypi_token.py", ("pypi-",), r"AgE[A-Za-z0-9_\-]{50}", "AgEIcHlwaS5vcmc{70}",
                "A-Za-z0-9_-"),
    PrefixShape("Square OAuth secret", DS + "square_oauth.py", ("sq0csp-",), r"[0-9A-Za-z_\-]{43}", "{43}",
                "A-Za-z0-9_-"),
    PrefixShape("Artifactory API token", DS + "artifactory.py", ("AKC",), r"[a-zA-Z0-9]{10}", "{64}"),
    # -- broker additions (issue 23 and the APIs agents call) ------------------------------------
    PrefixShape("Anthropic key", "broker", ("sk-ant-api03-", "sk-ant-admin01-", "sk-ant-oat01-", "sk-ant-ort01-"),
                r"[A-Za-z0-9_\-]{20}", "{93}AA", "A-Za-z0-9_-"),
    PrefixShape("OpenAI project / service key", "broker", ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-"),
                r"[A-Za-z0-9_\-]{20}", "{120}", "A-Za-z0-9_-"),
    PrefixShape("Stripe test key, webhook secret", "broker", ("sk_test_", "rk_test_", "whsec_"),
                r"[0-9a-zA-Z]{24}", "{32}"),
    PrefixShape("Hugging Face token", "broker", ("hf_",), r"[A-Za-z0-9]{30}", "{34}"),
    PrefixShape("npm token", "broker", ("npm_",), r"[A-Za-z0-9]{36}", "{36}"),
    PrefixShape("Square access token", "broker", ("sq0atp-",), r"[0-9A-Za-z_\-]{22}", "{22}", "A-Za-z0-9_-"),
    PrefixShape("Shopify token", "broker", ("shpat_", "shpss_", "shpca_", "shppa_"), r"[a-fA-F0-9]{32}", "{32}",
                "0-9a-f"),
    PrefixShape("DigitalOcean token", "broker", ("dop_v1_", "doo_v1_", "dor_v1_"), r"[a-f0-9]{64}", "{64}",
                "0-9a-f"),
    PrefixShape("Linear API key", "broker", ("lin_api_",), r"[A-Za-z0-9]{40}", "{40}"),
    PrefixShape("Notion token", "broker", ("ntn_", "secret_"), r"[A-Za-z0-9]{40}", "{43}"),
    PrefixShape("Postman API key", "broker", ("PMAK-",), r"[a-f0-9]{24}-[a-f0-9]{34}", "{24}-{34}", "0-9a-f"),
    PrefixShape("Sentry token", "broker", ("sntrys_", "sntryu_"), r"[A-Za-z0-9_\-=+/]{40}", "{64}"),
    PrefixShape("HashiCorp Vault token", "broker", ("hvs.", "hvb.", "hvr."), r"[A-Za-z0-9_\-]{24}", "{90}",
                "A-Za-z0-9_-"),
    PrefixShape("Atlassian API token", "broker", ("ATATT3",), r"[A-Za-z0-9_\-=]{20}", "{186}", "A-Za-z0-9_-"),
    PrefixShape("age secret key", "broker", ("AGE-SECRET-KEY-1",), r"[0-9A-Z]{40}", "{58}", "0-9A-Z"),
    PrefixShape("Grafana token", "broker", ("glc_", "glsa_"), r"[A-Za-z0-9_+/]{32}", "{32}"),
    PrefixShape("Supabase token", "broker", ("sbp_",), r"[a-f0-9]{40}", "{40}", "0-9a-f"),
    PrefixShape("Pulumi token", "broker", ("pul-",), r"[a-f0-9]{40}", "{40}", "0-9a-f"),
    PrefixShape("Figma token", "broker", ("figd_",), r"[A-Za-z0-9_\-]{40}", "{40}", "A-Za-z0-9_-"),
    PrefixShape("Replicate token", "broker", ("r8_",), r"[A-Za-z0-9]{37}", "{37}"),
    PrefixShape("Groq key", "broker", ("gsk_",), r"[A-Za-z0-9]{48}", "{52}"),
    PrefixShape("xAI key", "broker", ("xai-",), r"[A-Za-z0-9]{60}", "{80}"),
    PrefixShape("Perplexity key", "broker", ("pplx-",), r"[A-Za-z0-9]{40}", "{48}"),
    PrefixShape("New Relic key", "broker", ("NRAK-",), r"[A-Z0-9]{27}", "{27}", "0-9A-Z"),
    PrefixShape("Tailscale key", "broker", ("tskey-",), r"[A-Za-z0-9\-]{20}", "{40}"),
    PrefixShape("Netlify token", "broker", ("nfp_",), r"[A-Za-z0-9]{36}", "{36}"),
    PrefixShape("Buildkite token", "broker", ("bkua_",), r"[a-f0-9]{40}", "{40}", "0-9a-f"),
    PrefixShape("Heroku token", "broker", ("HRKU-",), r"[A-Za-z0-9_\-]{20}", "{60}", "A-Za-z0-9_-"),
    PrefixShape("Resend key", "broker", ("re_",), r"[A-Za-z0-9]{8}_[A-Za-z0-9]{20}", "{8}_{24}"),
)  # fmt: skip

# Key, field and parameter names that hold a credential, compared after normalising case and
# separators (secret_key, secretKey, Secret-Key are one name). detect-secrets' keyword detector
# (plugins/keyword.py DENYLIST, ASCII entries) first, then ours.
KEYWORD_NAMES: tuple[str, ...] = (
    # detect-secrets 1.5.0 keyword.py DENYLIST
    "api_key", "auth_key", "service_key", "account_key", "db_key", "database_key", "priv_key", "private_key",
    "client_key", "db_pass", "database_pass", "key_pass", "password", "passwd", "pwd", "secret", "contrasena",
    # broker. Each new first letter makes the scan of every JSON body slower (every string starting with
    # it is compared further), so names are chosen among the letters already used where possible.
    "pass", "passphrase", "secret_key", "connection_string", "secret_access_key", "aws_secret_access_key",
    "aws_session_token", "access_key_secret", "api_secret", "app_secret", "consumer_secret", "signing_secret",
    "shared_secret", "signing_key", "shared_access_key", "sas_token", "api_token", "bearer_token",
    "personal_access_token", "db_password", "admin_password", "user_password", "current_password",
    "smtp_password", "proxy_password", "root_password",
)  # fmt: skip
