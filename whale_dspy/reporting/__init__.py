"""Comparison tables and plots of WHALE runs, drawn from their report dicts (JSON, no optimizer import).

A report dict is `WhaleReport.to_dict()`: method, spend, curve (rollouts ->
mean@k with CI), best and final checkpoints. Several seeds of one method are
averaged; matplotlib is imported only when a plot is drawn (Agg backend).
"""

from __future__ import annotations

from whale_dspy.reporting.pairs import paired_table
from whale_dspy.reporting.plots import plot_curves
from whale_dspy.reporting.reach import reach_table
from whale_dspy.reporting.tables import MethodSummary, markdown_table, summarize_methods

__all__ = [
    "MethodSummary",
    "markdown_table",
    "paired_table",
    "plot_curves",
    "reach_table",
    "summarize_methods",
]
