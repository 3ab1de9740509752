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


def _core_imports():
    """{module: set of package modules it imports} for the core (relative imports, lazy ones too)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "rfol_dask"
    edges = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[0] in ("datasets", "baselines", "experiments") or parts[0] in (
            "cli",
            "_version",
            "__init__",
        ):
            continue
        package = parts[:-1]
        name = ".".join(package if parts[-1] == "__init__" else parts)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    targets.add(".".join(base + [node.module]))
                else:
                    targets.update(".".join(base + [a.name]) for a in node.names)
        edges[name] = targets - {"_version", name}
    return edges


def _documented_imports(known):
    """The core part of the import graph in docs/design.md, as {module: set of modules}; inside
    ``solve/__init__`` and ``recovery/__init__`` and their indented lines a bare name is the
    package's submodule where ``known`` has one."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    block = text.split("-- core\n", 1)[1].split("```", 1)[0]
    edges, package = {}, None
    for line in block.splitlines():
        head, _, tail = line.strip().partition(" ")
        name = head.replace(".py", "").replace("/__init__", "")
        if not line.startswith("     "):
            package = name if head.endswith("/__init__") else None
        elif package:
            name = f"{package}.{name}"
        arrow = re.search(r"-+>\s*(.*)", tail)
        targets = [
            t.strip()
            for t in (arrow.group(1).split("(")[0].split(",") if arrow else [])
            if t.strip()
        ]
        edges[name] = {
            f"{package}.{t}" if package and f"{package}.{t}" in known else t for t in targets
        }
    return edges


def test_the_documented_import_graph_is_the_code_s():
    code = _core_imports()
    doc = _documented_imports(set(code))
    assert set(doc) == set(code), set(doc) ^ set(code)
    wrong = {
        m: (sorted(doc[m] - code[m]), sorted(code[m] - doc[m])) for m in code if doc[m] != code[m]
    }
    assert not wrong, (
        f"docs/design.md's import graph differs from the code (documented only, imported only): {wrong}"
    )
