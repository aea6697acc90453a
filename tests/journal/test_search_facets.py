"""The time range a PostgreSQL store's facet indexes narrow a search by (journal/search.py `_facets`, compared on the
server as bytea: memcmp, then length, as Python compares bytes) keeps exactly the entries the file vault's checks
keep (`_Matcher.holds`, the final word; `_Matcher.maybe`, the line prefilter, keeps at least those): on random
timestamps and random prefixes given as --since / --until, ASCII and not."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from journal.search import Query, _facets, _Matcher

# The characters of a timestamp, the neighbours of the byte `until` is raised at, and UTF-8 of every length.
_CHARS = list("0123456789-T:.Z") + ["\x7f", "\x80", "\u00e9", "\u07ff", "\u0800", "\ue000", "\uffff", "\U0001f600",
                                    "\U0010ffff"]
_texts = st.one_of(st.text(st.sampled_from(_CHARS), max_size=26),
                   st.text(st.characters(exclude_categories=("Cs",)), max_size=8))
_ts = st.one_of(_texts, st.builds(lambda t, k: t[:k], st.just("2026-09-22T10:00:30.123Z"), st.integers(0, 24)))


def _indexed(facets, ts: str) -> bool:
    """The candidate condition of postgres_search.candidate_seqs for a row whose ts facet is `ts` as UTF-8."""
    value = ts.encode()
    return (facets.since is None or value >= facets.since) and (facets.before is None or value < facets.before)


@settings(max_examples=3000, deadline=None)
@given(_ts, st.one_of(st.none(), _ts), st.one_of(st.none(), _ts))
def test_the_index_range_keeps_what_holds_keeps(ts: str, since: str | None, until: str | None) -> None:
    query = Query(since=since or None, until=until or None)
    matcher = _Matcher(query)
    facets = _facets(query)
    kept = matcher.holds({"ts": ts})
    assert _indexed(facets, ts) == kept, (ts, since, until, facets)
    if kept and '"' not in ts and "\\" not in ts and all(c >= " " for c in ts):  # a line as canonical JSON spells it
        assert matcher.maybe(b'{"seq":1,"ts":"' + ts.encode() + b'"}')


def test_an_until_ending_in_the_highest_utf8_bytes_is_raised_past_them() -> None:
    """U+10FFFF, U+FFFF and U+07FF end in 0xbf (raised to 0xc0, a byte no UTF-8 string holds), U+007F in 0x7f
    (raised to 0x80, a continuation byte): every timestamp with that prefix stays below the bound, none after."""
    for last in ("\U0010ffff", "\uffff", "\u07ff", "\x7f"):
        facets = _facets(Query(until="2026" + last))
        assert _indexed(facets, "2026" + last + "-01") and not _indexed(facets, "2026" + chr(ord(last) + 1)
                                                                         if last != "\U0010ffff" else "2027")
