"""Only the optional C accelerator of the canonical form; everything else is in pyproject.toml.

`optional=True`: where it cannot be compiled (no C compiler or no Python headers) the install still
succeeds and journal/canonical.py uses its pure-Python implementation of the same rules."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("journal._canonical_speedups", ["journal/_canonical_speedups.c"], optional=True),
    ]
)
