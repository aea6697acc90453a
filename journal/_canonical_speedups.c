/* Optional C accelerator of journal/canonical.py (RFC 8785 / JCS), like CPython's _json for json.

   The rules are those of canonical.py, which stays the reference and the fallback (BROKER_NO_SPEEDUPS=1,
   or no compiler at install time); tests/journal/test_canonical_speedups.py checks both against each other.

   plain_json(value) -> bool
       True iff `value` is built only of exact dict with exact str keys, exact list, exact str, exact int
       within +-(2^53-1), bool and None, nested at most MAX_DEPTH containers deep. For such a value orjson's
       OPT_SORT_KEYS output is JCS, except keys mixing characters beyond the BMP with U+E000..U+FFFF and lone
       surrogates (orjson raises): canonical.py checks those. Everything else (float, NaN, tuple, enum member,
       date, any subclass, a big int, a cycle, deeper nesting) is False. No Python code runs during the walk.

   jcs_line(data: bytes) -> bool
       True iff `data` is, byte for byte, the canonical form of a JSON value holding no float: no whitespace,
       object keys strictly increasing in UTF-16 code-unit order (so no duplicates), strings of valid UTF-8
       with exactly the escapes JCS writes, integers 0 or -?[1-9][0-9]* within +-(2^53-1), at most MAX_DEPTH
       containers deep. False means "not proven": canonical.py's own test then decides. A float token or a key
       holding an escape is never proven. `data` may be hostile: every read is bounds-checked, there is no
       recursion, and nothing is allocated.

   fields_ok(fields) -> bool
       The one-pass contract check of the eleven fields a capture point supplies (journal/entry.py `_fields_ok`,
       the fast path of validate_fields) for exact types only: True only when _fields_ok is True; False (a str
       subclass, a key that is not an exact str, anything wrong) sends validate_fields to its Python checks,
       which decide. Keys are matched by their text in one walk over each dict; a dict with a key that is not an
       exact str gets a False, so no Python code runs.

   slot_cut(data: bytes, slot: bytes) -> tuple[bytes, bytes, bytes, bytes] | None
       journal/chain.py `link_pieces`' cut of the canonical line `data` (with seq, prev and hash set to the
       placeholder string `slot`) into the four pieces around them, or None when the placeholder does not occur
       exactly three times as the values of ,"hash": "prev": and "seq": in that order. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Containers nested at most this deep. orjson refuses 255 (its limit), so what plain_json passes orjson
   writes, and what jcs_line proves the reference test (msgspec read, orjson write) also accepts. */
#define MAX_DEPTH 254
#define MAX_SAFE_INTEGER 9007199254740991LL

/* ---- plain_json ------------------------------------------------------------------------------------- */

static int
plain(PyObject *v, int depth)
{
    if (v == Py_None || v == Py_True || v == Py_False || PyUnicode_CheckExact(v))
        return 1;
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return 0;
        if (n == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return -MAX_SAFE_INTEGER <= n && n <= MAX_SAFE_INTEGER;
    }
    if (PyList_CheckExact(v)) {
        if (depth >= MAX_DEPTH)
            return 0; /* also ends a list that holds itself */
        /* No Python code runs below, so the list cannot change size while it is walked. */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            if (!plain(PyList_GET_ITEM(v, i), depth + 1))
                return 0;
        }
        return 1;
    }
    if (PyDict_CheckExact(v)) {
        if (depth >= MAX_DEPTH)
            return 0;
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(v, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key) || !plain(item, depth + 1))
                return 0;
        }
        return 1;
    }
    return 0; /* float, tuple, bytes, any subclass (bool aside), enum member, date, dataclass, ... */
}

/* Recursion is bounded by MAX_DEPTH frames of a few words each, far within any C stack. */
static PyObject *
plain_json(PyObject *module, PyObject *value)
{
    return PyBool_FromLong(plain(value, 0));
}

/* ---- jcs_line --------------------------------------------------------------------------------------- */

/* Skips the bytes of a string that need no look: returns the first byte at or after s that is '"', '\\',
   below 0x20 or at/above 0x80, or the first of the last few bytes (fewer than a block) before end. Blocks are
   read only while a whole block lies before end. */
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
static inline const unsigned char *
skip_plain(const unsigned char *s, const unsigned char *end)
{
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - s >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)s);
        /* signed compare: bytes at/above 0x80 are negative, so below 0x20 too */
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                                 _mm_cmplt_epi8(x, space));
        int mask = _mm_movemask_epi8(m);
        if (mask)
            return s + __builtin_ctz((unsigned)mask);
        s += 16;
    }
    return s;
}
#else
/* Eight bytes at once (portable): nonzero when any of them needs a look (may also flag a harmless byte after
   a flagged one; the byte loop then looks at them one by one). */
static inline uint64_t
needs_look(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    return (((q - ones) & ~q) | ((b - ones) & ~b) | (x - ones * 0x20) | x) & highs;
}

static inline const unsigned char *
skip_plain(const unsigned char *s, const unsigned char *end)
{
    while (end - s >= 8) {
        uint64_t x;
        memcpy(&x, s, 8);
        if (needs_look(x))
            break;
        s += 8;
    }
    return s;
}
#endif

/* The byte after a valid UTF-8 sequence starting at s[0] >= 0x80, or NULL when it is not valid UTF-8
   (overlong forms, surrogates U+D800..U+DFFF and code points beyond U+10FFFF are invalid). */
static const unsigned char *
utf8_char(const unsigned char *s, const unsigned char *end)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    int n;
    if (c >= 0xC2 && c <= 0xDF)
        n = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    }
    else if (c >= 0xF0 && c <= 0xF4) {
        n = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    }
    else
        return NULL;
    if (end - s <= n || s[1] < lo || s[1] > hi)
        return NULL;
    for (int i = 2; i <= n; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF)
            return NULL;
    }
    return s + n + 1;
}

static inline int
lower_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

/* Scans the string whose opening quote is at s[-1]; returns the byte after its closing quote, or NULL
   when it is not a string as JCS writes it. *escaped is set when it holds an escape. */
static inline const unsigned char *
scan_string(const unsigned char *s, const unsigned char *end, int *escaped)
{
    *escaped = 0;
    for (;;) {
        s = skip_plain(s, end);
        if (s >= end)
            return NULL;
        unsigned char c = *s;
        if (c == '"')
            return s + 1;
        if (c < 0x20)
            return NULL; /* a raw control character is not JSON */
        if (c < 0x80 && c != '\\') {
            s++;
            continue;
        }
        if (c >= 0x80) {
            s = utf8_char(s, end);
            if (s == NULL)
                return NULL;
            continue;
        }
        /* An escape: only the ones JCS writes. */
        *escaped = 1;
        if (end - s < 2)
            return NULL;
        c = s[1];
        if (c == '"' || c == '\\' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            s += 2;
            continue;
        }
        if (c != 'u' || end - s < 6 || s[2] != '0' || s[3] != '0')
            return NULL;
        int h = lower_hex(s[4]), l = lower_hex(s[5]);
        if (h < 0 || h > 1 || l < 0)
            return NULL;
        int code = h * 16 + l; /* below 0x20; those with a short escape must use it */
        if (code == 0x08 || code == 0x09 || code == 0x0A || code == 0x0C || code == 0x0D)
            return NULL;
        s += 6;
    }
}

/* <0, 0, >0 as key a sorts before, equal to, after key b in UTF-16 code-unit order. Both are valid UTF-8
   without escapes, where byte order is code-point order. That differs from UTF-16 order only between a
   character in U+E000..U+FFFF (lead byte 0xEE or 0xEF) and one beyond the BMP (lead 0xF0..0xF4), whose
   surrogates sort first. The first differing byte decides: bytes before it are equal, so both strings are at
   the same place of a character (or of the same kind of character). */
static int
utf16_compare(const unsigned char *a, Py_ssize_t na, const unsigned char *b, Py_ssize_t nb)
{
    Py_ssize_t n = na < nb ? na : nb;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char x = a[i], y = b[i];
        if (x == y)
            continue;
        if (x >= 0xF0 && (y == 0xEE || y == 0xEF))
            return -1;
        if (y >= 0xF0 && (x == 0xEE || x == 0xEF))
            return 1;
        return x < y ? -1 : 1;
    }
    return na < nb ? -1 : na > nb ? 1 : 0;
}

/* Scans an integer at s (s < end); returns the byte after it, or NULL when it is not an integer as JCS
   writes it or is followed by a fraction or exponent (a float token is left to the reference test). */
static const unsigned char *
scan_integer(const unsigned char *s, const unsigned char *end)
{
    int negative = 0;
    if (*s == '-') {
        negative = 1;
        if (++s >= end)
            return NULL;
    }
    const unsigned char *digits = s;
    uint64_t n = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (s - digits >= 16)
            return NULL; /* 17 digits exceed 2^53-1 */
        n = n * 10 + (uint64_t)(*s - '0');
        s++;
    }
    if (s == digits)
        return NULL;
    if (s < end && (*s == '.' || *s == 'e' || *s == 'E'))
        return NULL;
    if (*digits == '0' && (s - digits > 1 || negative))
        return NULL; /* leading zero, or -0 */
    if (n > (uint64_t)MAX_SAFE_INTEGER)
        return NULL;
    return s;
}

static int
jcs(const unsigned char *s, Py_ssize_t len)
{
    const unsigned char *end = s + len;
    /* Per open container: whether it is an object, and the previous key (start, length) if it is. */
    char is_object[MAX_DEPTH];
    const unsigned char *key_at[MAX_DEPTH];
    Py_ssize_t key_len[MAX_DEPTH];
    int depth = 0, escaped;

value:
    if (s >= end)
        return 0;
    switch (*s) {
    case '{':
    case '[':
        if (depth == MAX_DEPTH)
            return 0;
        is_object[depth] = (*s == '{');
        key_at[depth] = NULL;
        depth++;
        s++;
        if (s < end && *s == (is_object[depth - 1] ? '}' : ']')) {
            depth--;
            s++;
            goto after_value;
        }
        if (is_object[depth - 1])
            goto key;
        goto value;
    case '"':
        s = scan_string(s + 1, end, &escaped);
        break;
    case 't':
        if (end - s < 4 || memcmp(s, "true", 4) != 0)
            return 0;
        s += 4;
        break;
    case 'f':
        if (end - s < 5 || memcmp(s, "false", 5) != 0)
            return 0;
        s += 5;
        break;
    case 'n':
        if (end - s < 4 || memcmp(s, "null", 4) != 0)
            return 0;
        s += 4;
        break;
    default:
        if (*s != '-' && (*s < '0' || *s > '9'))
            return 0;
        s = scan_integer(s, end);
        break;
    }
    if (s == NULL)
        return 0;

after_value:
    if (depth == 0)
        return s == end;
    if (s >= end)
        return 0;
    if (*s == ',') {
        s++;
        if (is_object[depth - 1])
            goto key;
        goto value;
    }
    if (*s != (is_object[depth - 1] ? '}' : ']'))
        return 0;
    depth--;
    s++;
    goto after_value;

key:
    if (s >= end || *s != '"')
        return 0;
    {
        const unsigned char *start = s + 1;
        s = scan_string(start, end, &escaped);
        if (s == NULL || escaped)
            return 0; /* a key with an escape is left to the reference test */
        Py_ssize_t n = (s - 1) - start;
        if (key_at[depth - 1] != NULL && utf16_compare(key_at[depth - 1], key_len[depth - 1], start, n) >= 0)
            return 0;
        key_at[depth - 1] = start;
        key_len[depth - 1] = n;
    }
    if (s >= end || *s != ':')
        return 0;
    s++;
    goto value;
}

static PyObject *
jcs_line(PyObject *module, PyObject *data)
{
    if (!PyBytes_CheckExact(data))
        Py_RETURN_FALSE;
    return PyBool_FromLong(jcs((const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)));
}

/* ---- fields_ok -------------------------------------------------------------------------------------- */

/* The values of `d` (an exact dict) under the keys `names`, in `out` (NULL where absent), found by one walk
   over its items comparing key text (no key object built, no hash computed). 0 when a key is not an exact str
   (its __eq__ could run Python code) or, with `only`, when a key is not among `names`. */
static int
pick(PyObject *d, const char *const *names, int count, PyObject **out, int only)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    for (int i = 0; i < count; i++)
        out[i] = NULL;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k))
            return 0;
        int found = -1;
        if (PyUnicode_IS_ASCII(k)) {
            const char *text = (const char *)PyUnicode_DATA(k);
            size_t len = (size_t)PyUnicode_GET_LENGTH(k);
            for (int i = 0; i < count; i++) {
                if (strlen(names[i]) == len && memcmp(names[i], text, len) == 0) {
                    found = i;
                    break;
                }
            }
        }
        if (found >= 0)
            out[found] = v;
        else if (only)
            return 0;
    }
    return 1;
}

static int
nonempty_str(PyObject *v)
{
    return v != NULL && PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) > 0;
}

static int
ascii_is(PyObject *v, const char *want)
{
    return v != NULL && PyUnicode_CheckExact(v) && PyUnicode_IS_ASCII(v)
           && strcmp((const char *)PyUnicode_DATA(v), want) == 0;
}

/* ts is YYYY-MM-DDTHH:MM:SS.mmmZ with ASCII digits (what _TS_SHAPE and _DIGITS_TO_ZERO check). */
static int
ts_ok(PyObject *v)
{
    static const char shape[] = "0000-00-00T00:00:00.000Z";
    if (v == NULL || !PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v) || PyUnicode_GET_LENGTH(v) != 24)
        return 0;
    const char *s = (const char *)PyUnicode_DATA(v);
    for (int i = 0; i < 24; i++) {
        if (shape[i] == '0' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return 0;
    }
    return 1;
}

/* connector matches [a-z0-9][a-z0-9_.-]*\Z (entry._CONNECTOR_RE). */
static int
connector_ok(PyObject *v)
{
    if (!nonempty_str(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    const char *s = (const char *)PyUnicode_DATA(v);
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && (c == '_' || c == '.' || c == '-'));
        if (!ok)
            return 0;
    }
    return 1;
}

/* A headers value: an exact list of exact lists of two exact str. */
static int
headers_ok(PyObject *v)
{
    if (v == NULL || !PyList_CheckExact(v))
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        PyObject *h = PyList_GET_ITEM(v, i);
        if (!PyList_CheckExact(h) || PyList_GET_SIZE(h) != 2 || !PyUnicode_CheckExact(PyList_GET_ITEM(h, 0))
            || !PyUnicode_CheckExact(PyList_GET_ITEM(h, 1)))
            return 0;
    }
    return 1;
}

enum { TS, SESSION, AGENT, PRINCIPAL, CONNECTOR, CAPTURE, PROMPT_REF, EFFECT, MCP, REQUEST, RESPONSE, N_FIELDS };
static const char *const field_names[N_FIELDS] = {
    "ts", "session", "agent", "principal", "connector", "capture", "prompt_ref", "effect", "mcp", "request",
    "response",
};
enum { METHOD, URL, BODY, HEADERS, STATUS, ERROR, N_MESSAGE };
static const char *const message_names[N_MESSAGE] = {"method", "url", "body", "headers", "status", "error"};

static int
fields_ok_(PyObject *e)
{
    PyObject *f[N_FIELDS], *req[N_MESSAGE], *resp[N_MESSAGE];
    /* Eleven distinct keys, each one of the eleven names: exactly those (dict keys are distinct). */
    if (!PyDict_CheckExact(e) || PyDict_GET_SIZE(e) != N_FIELDS || !pick(e, field_names, N_FIELDS, f, 1))
        return 0;
    PyObject *prompt_ref = f[PROMPT_REF], *mcp = f[MCP], *capture = f[CAPTURE], *effect = f[EFFECT];
    if (!ts_ok(f[TS]) || !nonempty_str(f[SESSION]) || !nonempty_str(f[AGENT]) || !nonempty_str(f[PRINCIPAL])
        || !(ascii_is(capture, "broker") || ascii_is(capture, "gateway") || ascii_is(capture, "agent"))
        || !(ascii_is(effect, "read") || ascii_is(effect, "write"))
        || !(prompt_ref == Py_None || PyUnicode_CheckExact(prompt_ref))
        || !(mcp == Py_None || PyDict_CheckExact(mcp))
        || !PyDict_CheckExact(f[REQUEST]) || !pick(f[REQUEST], message_names, N_MESSAGE, req, 0)
        || !PyDict_CheckExact(f[RESPONSE]) || !pick(f[RESPONSE], message_names, N_MESSAGE, resp, 0)
        || !connector_ok(f[CONNECTOR]))
        return 0;
    if (!nonempty_str(req[METHOD]) || req[URL] == NULL || !PyUnicode_CheckExact(req[URL]) || req[BODY] == NULL
        || resp[BODY] == NULL || resp[STATUS] == NULL)
        return 0;
    PyObject *status = resp[STATUS];
    if (status == Py_None) {
        if (resp[ERROR] == NULL)
            return 0;
    }
    else {
        if (!PyLong_CheckExact(status))
            return 0;
        int overflow;
        long n = PyLong_AsLongAndOverflow(status, &overflow); /* an exact int: sets no error */
        if (overflow || n < 100 || n > 999)
            return 0;
    }
    return headers_ok(req[HEADERS]) && headers_ok(resp[HEADERS]);
}

static PyObject *
fields_ok(PyObject *module, PyObject *fields)
{
    return PyBool_FromLong(fields_ok_(fields));
}

/* ---- slot_cut --------------------------------------------------------------------------------------- */

/* The offset of `needle` in data[from:], or -1 (memmem, with bounds). */
static Py_ssize_t
find_from(const char *data, Py_ssize_t size, const char *needle, Py_ssize_t n, Py_ssize_t from)
{
    if (from < 0 || from > size)
        return -1;
    const char *at = memmem(data + from, (size_t)(size - from), needle, (size_t)n);
    return at == NULL ? -1 : at - data;
}

static int
ends_with_at(const char *data, Py_ssize_t at, const char *key)
{
    Py_ssize_t k = (Py_ssize_t)strlen(key);
    return at >= k && memcmp(data + at - k, key, (size_t)k) == 0;
}

static PyObject *
slot_cut(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "slot_cut(data: bytes, slot: bytes)");
        return NULL;
    }
    const char *d = PyBytes_AS_STRING(args[0]), *slot = PyBytes_AS_STRING(args[1]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), n = PyBytes_GET_SIZE(args[1]);
    if (n == 0)
        Py_RETURN_NONE;
    Py_ssize_t h = find_from(d, size, slot, n, 0);
    Py_ssize_t p = h < 0 ? -1 : find_from(d, size, slot, n, h + n);
    Py_ssize_t q = p < 0 ? -1 : find_from(d, size, slot, n, p + n);
    if (q < 0 || find_from(d, size, slot, n, q + n) >= 0)
        Py_RETURN_NONE;
    /* ,"hash":"<slot>" ... "prev":"<slot>" ... "seq":"<slot>": the key before each, the quote after each */
    if (!ends_with_at(d, h, ",\"hash\":\"") || !ends_with_at(d, p, "\"prev\":\"") || !ends_with_at(d, q, "\"seq\":\""))
        Py_RETURN_NONE;
    /* data[:h-9], data[h+n+1:p], data[p+n:q-1], data[q+n+1:] (the quotes around seq's slot dropped: a number) */
    Py_ssize_t hk = (Py_ssize_t)strlen(",\"hash\":\""), c = p + n, e = q + n + 1 < size ? q + n + 1 : size;
    Py_ssize_t b = h + n + 1 < size ? h + n + 1 : size; /* as Python slices: a start past the stop gives b"" */
    return Py_BuildValue("(y#y#y#y#)", d, h - hk, d + b, p > b ? p - b : 0, d + c, q - 1 > c ? q - 1 - c : 0, d + e,
                         size - e);
}

/* ---- module ----------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"plain_json", plain_json, METH_O,
     "True iff the value is only exact dict (str keys), list, str, int within +-(2^53-1), bool, None."},
    {"jcs_line", jcs_line, METH_O, "True iff the bytes are, exactly, the JCS form of a float-free JSON value."},
    {"slot_cut", (PyCFunction)(void (*)(void))slot_cut, METH_FASTCALL,
     "chain.link_pieces' cut of a canonical line at its three placeholders: four pieces, or None."},
    {"fields_ok", fields_ok, METH_O,
     "True only when entry._fields_ok would say True of these eleven capture-point fields (False: ask it)."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "journal._canonical_speedups",
    "C accelerator of journal/canonical.py (see the comment at the top of _canonical_speedups.c).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__canonical_speedups(void)
{
    return PyModuleDef_Init(&module_def);
}
