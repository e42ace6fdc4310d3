"""Trace v1 files: schema, crash-safe recorder, reader, recover, compare."""
