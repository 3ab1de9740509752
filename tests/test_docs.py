"""The public entry points keep numpydoc docstrings (checked by numpydoc's validator), type hints
that resolve, and class docstrings that list every fitted attribute."""

import inspect
import typing

import numpy as np
import pytest
from numpydoc.docscrape import ClassDoc
from numpydoc.validate import validate

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperator, KernelOperatorCV

FUNCTIONS = [
    "rfol_dask.estimator.OperatorEstimator.fit",
    "rfol_dask.estimator.OperatorEstimator.predict",
    "rfol_dask.estimator.OperatorEstimator.score",
    "rfol_dask.estimator.OperatorEstimator.save",
    "rfol_dask.estimator.OperatorEstimator.load",
    "rfol_dask.solve.fit_dask",
    "rfol_dask.solve.in_memory.fit_numpy",
    "rfol_dask.features.draw_frequencies",
    "rfol_dask.features.feature_map",
    "rfol_dask.recovery.make_recovery",
    "rfol_dask.datasets.generate",
    "rfol_dask.curves.error_curve",
]
CLASSES = [
    "rfol_dask.RandomFeatureOperator",
    "rfol_dask.baselines.KernelOperator",
    "rfol_dask.RandomFeatureOperatorCV",
    "rfol_dask.baselines.KernelOperatorCV",
]

# numpydoc checks left out: extended summary, See Also and Examples sections are optional here
OPTIONAL = {"ES01", "SA01", "EX01"}


def _resolve(name):
    module, _, rest = name.partition(".")
    obj = __import__(module)
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", FUNCTIONS + CLASSES)
def test_docstring_passes_numpydoc_validation(name):
    """Summary line, every parameter documented with a type and a description, in signature
    order, a Returns section (functions), sections in numpydoc order."""
    errors = [f"{code}: {msg}" for code, msg in validate(name)["errors"] if code not in OPTIONAL]
    assert not errors, f"{name}:\n" + "\n".join(errors)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_signature_is_annotated_and_the_hints_resolve(name):
    func = _resolve(name)
    sig = inspect.signature(func)
    missing = [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "cls")
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.annotation is inspect.Parameter.empty
    ]
    assert not missing, f"{name}: parameters without a type hint: {missing}"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return annotation"
    import distributed  # imported for annotations only by the modules that name it

    typing.get_type_hints(func, localns={"distributed": distributed})


def _documented_attributes(cls):
    return {n.strip() for item in ClassDoc(cls)["Attributes"] for n in item.name.split(",")}


@pytest.mark.parametrize(
    "model",
    [
        RandomFeatureOperator(n_features=20, random_state=0),
        KernelOperator(n_components=3),
        RandomFeatureOperatorCV(n_features=20, gammas=(1.0,), alphas=(1e-3,), random_state=0),
        KernelOperatorCV(n_components=3, length_scales=(1.0,), nuggets=(1e-3,)),
    ],
    ids=lambda m: type(m).__name__,
)
def test_class_docstring_lists_every_fitted_attribute(model):
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, 8)
    model.fit(
        rng.standard_normal((30, 8)), rng.standard_normal((30, 8)), input_grid=[x], output_grid=[x]
    )
    fitted = {k for k in vars(model) if k.endswith("_") and not k.startswith("_")}
    undocumented = fitted - _documented_attributes(type(model))
    assert not undocumented, (
        f"{type(model).__name__} docstring lacks the fitted attributes {sorted(undocumented)}"
    )
