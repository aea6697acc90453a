"""What the CLI's text output may show of a string it did not write itself: the one place that says it.

Whoever can write the vault, and the recorded agent (its URLs, headers, tool names, arguments, bodies), are
adversaries of the person reading `broker verify`, `show`, `search`, `revert-plan`, `trajectory`, `diff` and
the rest. A line break in such a string would print a line of its own (`<session>: intact`), a carriage
return would overwrite the line it is on, an ESC or a C1 control would start a terminal sequence (clear the
screen, set the title, hide or rewrite earlier lines), a bidirectional override would reorder what is shown.

The rule, for every text (non-JSON) output of the CLI:

- Every character of `_UNSHOWABLE` (C0 controls, DEL, C1 controls, U+2028 and U+2029, the bidirectional
  embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069) in a string that came from the vault,
  the recorded traffic, a store or a file name the vault holds is printed as its escape, spelled out:
  `\\n`, `\\r`, `\\t`, `\\x1b`, `\\x85`, `\\u2028`, `\\u202e` (`one_line`). Nothing else is changed; a
  backslash stays a backslash, so the spelled-out escape of a recorded ESC reads like a recorded `\\x1b`.
- An output is escaped one logical line at a time: the line as the command formed it, with every value in
  it. The only line breaks printed are the command's own; a value's line break is shown as `\\n` inside its
  line. A command whose output is documented as several lines (the trajectory and diff reports, the revert
  plan) forms its lines first and escapes each one; columns are escaped before they are padded, so that
  they stay aligned.
- JSON shown inside a text output (`broker show --seq N`'s entry, the revert plan's call bodies) is
  orjson's, whose strings already hold no raw C0 control; `json_text` writes the other characters of
  `_UNSHOWABLE` as JSON escapes (`\\u009b`, `\\u2028`), so what is shown still reads back as the same value.
- `--json` outputs are not changed: they are for programs (orjson escapes C0 controls there; DEL, C1
  controls, U+2028/U+2029 and the bidirectional marks are kept as the UTF-8 they are, as JSON allows).
- rich (the progress bar on stderr) is given only the broker's own words: rich reads `[bold]`-style markup
  in what it prints, so a vault string handed to it would have to go through `rich.markup.escape` first.
"""

from __future__ import annotations

import re

# Characters that move the cursor or break a line on a terminal or in a log (C0 and C1 controls, DEL, the Unicode
# line and paragraph separators) and the bidirectional embeddings, overrides and isolates that reorder what is
# shown.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

# In JSON text: what orjson leaves as it is (it escapes the C0 controls itself; its indentation's line breaks
# are the output's own).
_UNSHOWABLE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: object) -> str:
    """`text` (str() of it) with every character of _UNSHOWABLE written as its escape (\\n, \\x1b, \\u2028): one
    line however it was made, with no terminal sequence in it."""
    return _UNSHOWABLE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), str(text))


def json_text(text: str) -> str:
    """orjson's `text` with the characters of _UNSHOWABLE it keeps written as JSON escapes (`\\u009b`): the same
    JSON value, shown safely; its own line breaks (OPT_INDENT_2) stay."""
    return _UNSHOWABLE_IN_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def shown_lines(lines: list[str]) -> str:
    """A report formed as `lines` (each one line as its command formed it), each escaped, joined by line
    breaks: the only ones printed."""
    return "\n".join(one_line(line) for line in lines)
