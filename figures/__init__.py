"""Reproduction figures, drawn from the committed benchmark CSVs: ``make_figures`` (the command
line and the list of figures), ``common`` (styles, provenance line, saving), one module per
family: ``paper_figures``, ``timings``, ``beyond``."""
