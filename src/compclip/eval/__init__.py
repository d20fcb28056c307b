"""One evaluation harness: compositionality, zero-shot and retrieval benchmarks behind one registry.

Importing the benchmark modules registers them (`base.REGISTRY`), timm-style.
"""
from ..methods.occlip import GraphScorer
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
from .report import build_report
from .run import evaluate
from .scorer import DualEncoderScorer, Scorer, load_scorer

__all__ = ["REGISTRY", "Benchmark", "DualEncoderScorer", "GraphScorer", "Scorer", "build_report", "evaluate", "load_scorer", "protocols",
           "register"]
