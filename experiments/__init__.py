"""Benchmark harness: sweeps, implementations, runner, results.

* :mod:`experiments.sweeps` -- every sweep (paper-grid, fig1-length, fig1-dim, gamma, long, cpu),
  defined in one place.
* :mod:`experiments.impls` -- the implementations measured (ours and :mod:`baselines`), with
  their devices, length limits, memory models and launch counters.
* :mod:`experiments.run` -- ``python -m experiments.run --sweep NAME ...``: long-format CSVs
  with provenance under ``experiments/results/<machine>/``, and a summary table.
* :mod:`experiments.load` -- the committed CSVs read back, for the figures
  (:mod:`figures.make_figures`) and the report (:mod:`paper.make_report`).
* :mod:`experiments.probes` -- ``python -m experiments.probes.NAME``: one GPU diagnostic per
  open question (kernel times, first calls, the Triton gradients' rule, memory).

Nothing here touches a GPU at import time.
"""
