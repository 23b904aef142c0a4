"""Runnable examples: ``python -m examples.forecasting``, ``python -m examples.barycenter``."""
