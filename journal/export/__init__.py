"""Exports of a recorded session into formats other tools read (test fixture, HAR, VCR, OTLP).

One module per format; each reads the vault through journal.reader / journal.verify and never
writes to it. What each field maps to is in docs/exports.md.
"""
