"""Reports: results -> figures (matplotlib Figures; callers decide where to save) and tables."""

from mnemoscope.report.figures import save_figure
from mnemoscope.report.roc import roc_figure
from mnemoscope.report.tables import leaderboard_markdown

__all__ = ["leaderboard_markdown", "roc_figure", "save_figure"]
