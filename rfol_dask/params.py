"""scikit-learn's parameter constraints, the one place the package reads them from.

They live in a private scikit-learn module (``sklearn.utils._param_validation``); importing them
here alone keeps an upgrade that moves them to one line to change.
"""

from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

__all__ = ["Interval", "StrOptions", "validate_parameter_constraints"]
