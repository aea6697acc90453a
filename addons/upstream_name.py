"""`mitmdump -s addons/upstream_name.py`: a transparently captured request goes to the host the
client named; the addon lives in `broker/proxy/upstream_name.py`.

Kept so stock mitmproxy can load the broker's addons by path; the code is in the package.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:  # loaded by path: make the project's packages importable
    sys.path.insert(0, _ROOT)

from broker.proxy.upstream_name import UpstreamName  # noqa: E402

addons = [UpstreamName()]
