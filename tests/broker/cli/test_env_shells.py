"""`broker env --shell`: each shell's line sets the variable to the exact value, whatever characters it holds."""

from __future__ import annotations

import pytest

from broker.cli.env import setting_line

NASTY = "http://s%20x:a'b\\c$HOME`x`\"q\"@127.0.0.1:8080"


@pytest.mark.parametrize(("shell", "expected"), [
    ("posix", "export HTTPS_PROXY='http://s%20x:a'\"'\"'b\\c$HOME`x`\"q\"@127.0.0.1:8080'"),
    ("fish", "set -gx HTTPS_PROXY 'http://s%20x:a\\'b\\\\c$HOME`x`\"q\"@127.0.0.1:8080'"),
    ("powershell", "$env:HTTPS_PROXY = 'http://s%20x:a''b\\c$HOME`x`\"q\"@127.0.0.1:8080'"),
])
def test_each_shell_quotes_the_value_verbatim(shell, expected):
    assert setting_line(shell, "HTTPS_PROXY", NASTY) == expected


def test_fish_and_powershell_unquote_back_to_the_value():
    fish = setting_line("fish", "X", NASTY).split(" ", 3)[3]
    assert fish[0] == fish[-1] == "'"
    assert fish[1:-1].replace("\\\\", "\0").replace("\\'", "'").replace("\0", "\\") == NASTY
    ps = setting_line("powershell", "X", NASTY).split(" = ", 1)[1]
    assert ps[1:-1].replace("''", "'") == NASTY
