"""One evaluation harness: compositionality, zero-shot and retrieval benchmarks behind one registry.

Importing the benchmark modules registers them (`base.REGISTRY`), timm-style.
"""
from . import (  # noqa: F401
    aro,
    concept_ranking,
    inpaint_coco,
    protocols,
    retrieval,
    sugarcrepe,
    sugarcrepe_pp,
    vl_checklist,
    whatsup,
    winoground,
    zeroshot,
)
from .base import REGISTRY, Benchmark, register
from .encoder import Encoder
from .report import build_report
from .run import evaluate

__all__ = ["REGISTRY", "Benchmark", "Encoder", "build_report", "evaluate", "protocols", "register"]
