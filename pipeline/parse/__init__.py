"""PyPTO's files (simulated or captured on a device) -> polars tables.

Parsers read only files.  Every metric that a profiling file carries is
recomputed here from that file; metrics.json supplies only what no PyPTO file
has (FLOPs, bytes, workspace).
"""
