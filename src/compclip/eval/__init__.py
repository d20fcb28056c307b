"""One evaluation harness: compositionality, zero-shot and retrieval benchmarks behind one registry.

Each benchmark is one module of `eval/benchmarks/`, which registers itself (`@register`) in `base.REGISTRY`; the registry
imports them, and installed plugins' (entry-point group `compclip.benchmarks`), on its first read. `EvalConfig` (the
declaration `compclip eval` is generated from) imports nothing heavy; the rest loads on first use of any other name here.
"""
from ..lazy import lazy_names
from .config import EvalConfig

__getattr__ = lazy_names(__name__, {"REGISTRY": ".base", "Benchmark": ".base", "register": ".base", "build_report": ".report",
                                     "evaluate": ".run", "DualEncoderScorer": ".scorer", "Scorer": ".scorer", "load_scorer": ".scorer"})

__all__ = ["REGISTRY", "Benchmark", "DualEncoderScorer", "EvalConfig", "Scorer", "build_report", "evaluate", "load_scorer",
           "register"]
