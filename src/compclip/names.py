"""The names the command line takes, declared where reading them imports nothing heavy: the precisions, and the
methods and benchmarks compclip ships (their registries, `compclip.methods` and `compclip.eval`, hold the same names:
tests/test_cli.py checks). A mistyped one is refused before torch's import, 10-15 s sooner, and shell completion offers
them. An installed plugin's names are its entry points' (read without loading it)."""
from __future__ import annotations

import sys
from importlib.metadata import entry_points

from .errors import UsageError
from .text import did_you_mean

PRECISIONS = ("fp32", "amp_bf16", "amp")  # a scoring run's: autocast over fp32 weights
# a training run's, as open_clip_train spells them: autocast, OpenAI's mixed precision (16-bit weights, 32-bit layer norms),
# or every weight in 16 bits (open_clip's `create_model(precision=...)` casts the weights of the last two kinds)
# BLIP's retrieval scores (`compclip.transformers_scoring.blip`), the default first: BLIP's own re-ranking rule
BLIP_SCORES = ("itm+itc", "itm", "itc")
TRAIN_PRECISIONS = (*PRECISIONS, "amp_bfloat16", "bf16", "fp16", "pure_bf16", "pure_fp16")

SHIPPED_METHODS = ("attswap", "c2lip", "ceclip", "clic", "clip", "conclip", "dac",
                   "hardneg", "negclip", "occlip", "siglip", "svlc", "tripletclip")
SHIPPED_BENCHMARKS = ("aro_order", "aro_vg_attribution", "aro_vg_relation", "bla", "cola", "colorfoil", "colorswap",
                      "concept_ranking", "crepe", "eqben", "imagecode", "inpaint_coco", "retrieval", "spec", "sugarcrepe",
                      "sugarcrepe_pp", "svo_probes", "valse", "vl_checklist", "whatsup", "winoground", "zeroshot")

BENCHMARK_LISTING = " (`compclip benchmarks` lists them)"  # how an unknown benchmark's error ends (`eval.run.resolve`'s)

# each kind: its shipped names, its plugins' entry-point group, and the module of its registry
KINDS = {"method": (SHIPPED_METHODS, "compclip.methods", "compclip.methods.base"),
         "benchmark": (SHIPPED_BENCHMARKS, "compclip.benchmarks", "compclip.eval.base")}


def known_names(kind: str) -> list[str]:
    """The names of `kind` ("method" or "benchmark") known without importing them: the shipped ones and each installed
    plugin's entry point's."""
    shipped, group, _ = KINDS[kind]
    return sorted({*shipped, *(entry.name for entry in entry_points(group=group))})


def check_names(kind: str, names: list[str], listing: str = "", suggested: tuple[str, ...] = ()) -> None:
    """Refuse a name of `kind` nobody declares, in the words of its registry (`listing` ends them), before the registry is
    imported; where it is imported already, a module of this process may have registered more: the registry answers.
    `suggested`: other names the same flag takes (CLIP_benchmark's dataset names), offered beside the kind's own."""
    if KINDS[kind][2] in sys.modules:
        return
    known = known_names(kind)
    for name in names:
        if name not in known:
            raise UsageError(f"unknown {kind} {name!r}{did_you_mean(name, [*known, *suggested], n=2)}; known: {', '.join(known)}{listing}")
