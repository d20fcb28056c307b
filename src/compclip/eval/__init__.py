"""One evaluation harness: compositionality, zero-shot and retrieval benchmarks behind one registry.

Importing the benchmark modules registers them (`base.REGISTRY`), timm-style.
"""
from . import aro, concept_ranking, inpaint_coco, protocols, retrieval, sugarcrepe, sugarcrepe_pp, vl_checklist, whatsup, winoground, zeroshot  # noqa: F401
from .base import REGISTRY, Benchmark, register
from .encoder import Encoder
from .report import build_report
from .run import evaluate

__all__ = ["REGISTRY", "Benchmark", "Encoder", "build_report", "evaluate", "protocols", "register"]
