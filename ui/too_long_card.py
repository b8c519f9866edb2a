"""The problem card's old module name, kept so code written before the rename still imports."""

from ui.problem_card import ProblemCard, step_for, step_label

__all__ = ["ProblemCard", "step_for", "step_label"]
