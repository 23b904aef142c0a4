"""Benchmark harness: sweeps, implementations, runner, results.

* :mod:`experiments.sweeps` -- every sweep (paper-grid, fig1-length, fig1-dim, gamma, long, cpu),
  defined in one place.
* :mod:`experiments.impls` -- the implementations measured (ours and :mod:`baselines`), with
  their devices, length limits, memory models and launch counters.
* :mod:`experiments.run` -- ``python -m experiments.run --sweep NAME ...``, the command line:
  long-format CSVs with provenance under ``experiments/results/local/<machine>/`` (the
  committed ``experiments/results/<machine>/`` with ``--replace-committed``), and a summary.
  It runs :mod:`experiments.runner` (a sweep, crash-safe and resumable), which runs
  :mod:`experiments.measure` (one measurement: gates, reference, rows) on
  :mod:`experiments.timing` (the step and its timer); :mod:`experiments.results_csv` (the CSV:
  columns, appending, reading back for ``--resume``), :mod:`experiments.provenance` (machine,
  versions, commit, results folders) and :mod:`experiments.summary` (the end-of-run report).
* :mod:`experiments.merge` -- a partial re-run's rows into a committed CSV.
* :mod:`experiments.load` -- the committed CSVs read back, for the figures
  (:mod:`figures.make_figures`) and the report (:mod:`paper.make_report`).
* :mod:`experiments.probes` -- ``python -m experiments.probes.NAME``: one GPU diagnostic per
  open question (kernel times, first calls, the Triton gradients' rule, memory).

Nothing here touches a GPU at import time; the sweeps' and implementations' registries, and
the loader, import without torch (the figures and the report need none).
"""
