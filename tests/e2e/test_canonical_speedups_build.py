"""journal/_canonical_speedups.c built as the install does not build it here: its portable scan, and under ASan.

The installed build on x86-64 takes the SSE2 branch of `skip_plain`; the eight-bytes-at-a-time branch is what
runs where there is no SSE2 (aarch64: Apple silicon, Graviton) and no test here would ever reach it. Built with
`-U__SSE2__`, it must give `jcs_line`'s verdict on every hostile line.

A line from a vault is hostile, and `jcs_line` reads it in place: an out-of-bounds read by one byte would go
unseen from Python (a bytes object is followed by its NUL and allocator slack). So `jcs()` is also compiled into a
small C program with AddressSanitizer and UndefinedBehaviorSanitizer, each line copied into a buffer of exactly
its length (the redzone right after its last byte), both branches; every verdict must be the extension's and
the sanitizers must stay silent. These start a compiler, so they live with the e2e tests; without a C compiler,
Python's headers or libasan they are skipped (tests/journal/test_canonical_speedups.py says whether the
extension itself must be built).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import shlex
import shutil
import struct
import subprocess
import sysconfig
from pathlib import Path

import pytest

from journal.chain import chain_entry
from tests.support.journal_factories import fields

try:
    from journal import _canonical_speedups as speedups
except ImportError:
    speedups = None

SOURCE = Path(__file__).resolve().parents[2] / "journal" / "_canonical_speedups.c"
CC = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
INCLUDE = sysconfig.get_paths()["include"]

pytestmark = [
    pytest.mark.skipif(speedups is None, reason="the C accelerator is not built"),
    pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC})"),
    pytest.mark.skipif(not (Path(INCLUDE) / "Python.h").exists(), reason="no Python headers"),
]


def _compile(*args: str) -> None:
    r = subprocess.run([CC, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def _corpus() -> list[bytes]:
    """Canonical journal lines, every prefix of them, strings with each byte the scan stops at placed at every
    offset across two 16-byte blocks (and cut right after it), number and nesting edges, and 20000 byte mutations."""
    real = [chain_entry(fields(n=3), 3, "0" * 64)[1][:-1],
            chain_entry(fields(n=70, agent="\U0001f600\ue000 \x1f\"\\\x7f\u2028"), 70, "f" * 64)[1][:-1]]
    lines = list(real)
    for line in real:
        lines += [line[:i] for i in range(len(line))]
    stops = [b'"', b"\\", b"\x00", b"\x1f", b"\x7f", b"\x80", b"\xc3", b"\xc3\xa9", b"\xe2\x82", b"\xe2\x82\xac",
             b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"\\u00", b"\\u001f", b"\\n", b"\\u", b"\\/"]
    for n in range(40):
        for stop in stops:
            for tail in (b"", b'"', b'"]', b'":1}'):
                lines += [b'"' + b"a" * n + stop + tail, b'["' + b"a" * n + stop + tail, b'{"' + b"a" * n + stop + tail]
    for i in range(1, 20):
        lines += [b"9" * i, b"-" + b"9" * i, b"1" + b"0" * i, b"[" + b"1" * i, b"-", b"-0", b"[-"]
    lines += [b"[" * 254 + b"]" * 254, b"[" * 255 + b"]" * 255, b"[" * 100_000, b'{"a":' * 100_000, b""]
    rng = random.Random(8785)
    interesting = list(b'"\\{}[]:,-0123456789.eEtfnu \x00\x1f\x7f\x80\xbf\xc0\xc2\xdf\xe0\xed\xee\xef\xf0\xf4\xf5\xff')
    for _ in range(20_000):
        line = bytearray(rng.choice(real))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(line))
            byte = rng.choice(interesting) if rng.random() < 0.7 else rng.randint(0, 255)
            op = rng.choice("sidc")
            if op == "s" and at < len(line):
                line[at] = byte
            elif op == "i":
                line[at:at] = bytes([byte])
            elif op == "d":
                del line[at : at + rng.randint(1, 4)]
            elif op == "c":
                line = line[:at]
        lines.append(bytes(line))
    return lines


CORPUS = _corpus()


def test_the_portable_scan_gives_the_sse2_scans_verdicts(tmp_path):
    built = tmp_path / ("_canonical_speedups" + sysconfig.get_config_var("EXT_SUFFIX"))
    _compile("-shared", "-fPIC", "-O2", "-U__SSE2__", f"-I{INCLUDE}", str(SOURCE), "-o", str(built))
    loader = importlib.machinery.ExtensionFileLoader("journal._canonical_speedups", str(built))
    spec = importlib.util.spec_from_file_location("journal._canonical_speedups", built, loader=loader)
    assert spec is not None
    portable = importlib.util.module_from_spec(spec)  # not put in sys.modules: the installed build stays in use
    loader.exec_module(portable)
    assert portable is not speedups
    differ = [line for line in CORPUS if portable.jcs_line(line) != speedups.jcs_line(line)]
    assert not differ, differ[:5]
    assert sum(map(portable.jcs_line, CORPUS)) > 1000  # the corpus holds canonical lines, not only refusals


_HARNESS = r"""
#include SOURCE
#include <stdio.h>
#include <stdlib.h>
/* Records of a 4-byte little-endian length and the bytes; one verdict character per record. */
int main(void) {
    unsigned char head[4];
    while (fread(head, 1, 4, stdin) == 4) {
        size_t n = head[0] | head[1] << 8 | head[2] << 16 | (size_t)head[3] << 24;
        unsigned char *line = malloc(n ? n : 1);
        if (line == NULL || (n && fread(line, 1, n, stdin) != n))
            return 2;
        putchar(jcs(line, (Py_ssize_t)n) ? '1' : '0');
        free(line);
    }
    return 0;
}
"""


def _libpython() -> tuple[str, str] | None:
    """(directory, name) of a shared libpython to link the harness with (the module's Python calls are never made
    there, but they must resolve); None when this Python has none."""
    libdir, version = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDVERSION")
    if libdir and version and (Path(libdir) / f"libpython{version}.so").exists():
        return libdir, f"python{version}"
    return None


@pytest.mark.parametrize("branch", ["sse2", "portable"])
def test_jcs_reads_no_byte_outside_the_line_under_asan(tmp_path, branch):
    lib = _libpython()
    if lib is None:
        pytest.skip("no shared libpython to link the harness with")
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if subprocess.run([CC, "-fsanitize=address,undefined", str(probe), "-o", str(tmp_path / "probe")],
                      capture_output=True, timeout=120).returncode:
        pytest.skip("no AddressSanitizer (libasan) for this compiler")
    harness = tmp_path / "harness.c"
    harness.write_text(_HARNESS.replace("SOURCE", '"' + str(SOURCE) + '"'))
    exe = tmp_path / "harness"
    flags = ["-U__SSE2__"] if branch == "portable" else []
    _compile("-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
             *flags, f"-I{INCLUDE}", str(harness), "-o", str(exe), f"-L{lib[0]}", f"-l{lib[1]}",
             f"-Wl,-rpath,{lib[0]}")
    records = b"".join(struct.pack("<I", len(line)) + line for line in CORPUS)
    r = subprocess.run([str(exe)], input=records, capture_output=True, timeout=600,
                       env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    assert r.stdout.decode() == "".join("1" if speedups.jcs_line(line) else "0" for line in CORPUS)
