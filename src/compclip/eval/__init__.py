"""One evaluation harness: compositionality, zero-shot and retrieval benchmarks behind one registry.

Importing the benchmark modules registers them (`base.REGISTRY`), timm-style. `EvalConfig` (the declaration
`compclip eval` is generated from) imports nothing heavy; the rest loads on first use of any other name here
(submodules such as `protocols` import as usual).
"""
from importlib import import_module

from .config import EvalConfig

_LAZY = {"REGISTRY": ".base", "Benchmark": ".base", "register": ".base", "build_report": ".report", "evaluate": ".run",
         "DualEncoderScorer": ".scorer", "Scorer": ".scorer", "load_scorer": ".scorer"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import_module(".run", __name__)  # the harness: it registers every benchmark
    return getattr(import_module(_LAZY[name], __name__), name)


__all__ = ["REGISTRY", "Benchmark", "DualEncoderScorer", "EvalConfig", "Scorer", "build_report", "evaluate", "load_scorer",
           "register"]
