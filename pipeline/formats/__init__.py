"""The files PyPTO writes, one module per file format.

Each module holds the layout rules of one upstream format (names, numbering,
record layouts, line grammars) so that the emitter (``pipeline/emit``) that
writes the file and the parser (``pipeline/parse``) that reads it cannot drift
apart.  Modules here import nothing heavier than numpy, so every command can
use them at start-up.

- ``cores``: core-type numbering and the lane names every file uses;
- ``task_id``: taskId / seqNo encoding and the display name of a task;
- ``topo``: ``dyn_topo.txt``;
- ``program``: ``program.json`` (function hierarchy, calls, tile ops);
- ``swimlane``: ``tilefwk_L1_prof_data.json``, ``merged_swimlane.json``,
  ``bubble_analysis.log`` and the AICore summary;
- ``perf_trace``: ``machine_trace_perf_data_<N>.json`` and its AICPU view;
- ``pmu``: msprof ``aicpu.data`` records (PMU and LOG) and the PMU Trace paths.
"""
