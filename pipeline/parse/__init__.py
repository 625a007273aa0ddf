"""PyPTO's files (simulated or captured on a device) -> polars tables.

Parsers read only files.  Every metric a profiling file carries is computed
here from that file; the simulator's metrics.json supplies only what no PyPTO
file has (FLOPs, bytes, workspace), and is never rewritten (see run.py).
"""
