"""Reproduction figures, drawn from the committed benchmark CSVs (``make_figures``)."""
