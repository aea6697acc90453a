"""`mitmdump -s addons/playback.py`: answer every call from a recorded session (load it before
connector_journal.py); the addon lives in `broker/proxy/playback.py`.

Kept so stock mitmproxy can load the broker's addons by path; the code is in the package.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:  # loaded by path: make the project's packages importable
    sys.path.insert(0, _ROOT)

from broker.proxy.playback import Playback  # noqa: E402

addons = [Playback()]
