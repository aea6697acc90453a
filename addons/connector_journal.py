"""`mitmdump -s addons/connector_journal.py`: the recording addon, which lives in `broker/proxy/addon.py`
(with upstream resolution, so `broker_resolve` works here too).

Kept so stock mitmproxy can load the broker's addons by path; the code is in the package.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:  # loaded by path: make the project's packages importable
    sys.path.insert(0, _ROOT)

from broker.proxy.addon import ConnectorJournal  # noqa: E402
from broker.proxy.upstream_resolve import UpstreamResolve  # noqa: E402

addons = [UpstreamResolve(), ConnectorJournal()]
