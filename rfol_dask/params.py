"""scikit-learn's parameter constraints, read from its private ``_param_validation`` here only."""

from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

__all__ = ["Interval", "StrOptions", "validate_parameter_constraints"]
