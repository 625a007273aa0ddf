"""Nightly regression reports.

A nightly job builds the nightly study set, then compares every metric of every
stage with a baseline committed under ``baselines/``.  The model is
deterministic, so any difference is real: the report says what moved, by how
much, and which dev tasks, leaf functions or pipes explain it.

- :mod:`.config`   ``configs/nightly.yaml``: studies and thresholds per metric;
- :mod:`.plan`     the workflow plan extended with the nightly studies;
- :mod:`.summary`  what a stage's files say, in the shape a baseline records;
- :mod:`.baseline` reading and (on purpose) rewriting ``baselines/<study>.yaml``;
- :mod:`.compare`  metric changes against thresholds, and the evidence behind them;
- :mod:`.history`  one small JSON per nightly run and the trend chart;
- :mod:`.run`      the whole check: compare, render, record, decide the exit code.
"""
