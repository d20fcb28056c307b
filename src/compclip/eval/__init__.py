"""One evaluation harness: compositionality, zero-shot and retrieval benchmarks behind one registry.

Importing the benchmark modules registers them (`base.REGISTRY`), timm-style. `EvalConfig` (the declaration
`compclip eval` is generated from) imports nothing heavy; the rest loads on first use of any other name here
(submodules such as `protocols` import as usual).
"""
from ..lazy import lazy_names
from .config import EvalConfig

__getattr__ = lazy_names(__name__, {"REGISTRY": ".base", "Benchmark": ".base", "register": ".base", "build_report": ".report",
                                     "evaluate": ".run", "DualEncoderScorer": ".scorer", "Scorer": ".scorer", "load_scorer": ".scorer"},
                         first=".run")  # the harness first: importing it registers every benchmark

__all__ = ["REGISTRY", "Benchmark", "DualEncoderScorer", "EvalConfig", "Scorer", "build_report", "evaluate", "load_scorer",
           "register"]
