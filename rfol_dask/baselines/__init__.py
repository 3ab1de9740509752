"""Baselines run on the same data and machinery: exact kernel ridge regression for operators
(RBF, Matern 1/2, 3/2, 5/2, inverse quadratic, with optional input PCA) and the linear baseline
(``KernelOperator(kernel="linear")``, ridge on the raw inputs)."""

from .kernel import KernelOperator, pca
from .kernel_cv import KernelOperatorCV
from .kernels import KERNELS, kernel_tile

__all__ = ["KernelOperator", "KernelOperatorCV", "KERNELS", "kernel_tile", "pca"]
