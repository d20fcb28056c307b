"""`EvalConfig`: every option of an evaluation, declared once (name, type, default, help); `compclip eval`'s flags
are generated from it. Nothing heavy is imported here, so that the command line's help stays instant."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..loggers import REPORTERS
from ..names import BENCHMARK_LISTING, BLIP_SCORES, PRECISIONS, check_names
from ..names import known_names as benchmark_names_of
from ..options import MODEL_HELP, option


def split_options(items: list[str]) -> dict[str, dict[str, str]]:
    """`NAME.KEY=VALUE` command-line items as `{NAME: {KEY: VALUE}}`."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        head, sep, value = item.partition("=")
        name, dot, key = head.partition(".")
        if not sep or not dot or not name.strip() or not key.strip():
            raise UsageError(f"--bench-opt {item!r}: expected NAME.KEY=VALUE, e.g. vl_checklist.pairs=zip")
        out.setdefault(name.strip(), {})[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class EvalConfig:
    model: str = option(help=MODEL_HELP.removesuffix(".") + ", a released checkpoint's id (`compclip models`), or a transformers "
                             "CLIP, SigLIP, BLIP retrieval or FLAVA model: its folder, or hf:ORG/NAME from the Hugging Face cache. "
                             "Several, comma-separated or a .txt file of names (one a line): each into OUT/<name>/, those with "
                             "every result there skipped.")
    benchmark: str = option(help="Comma-separated benchmarks, NAME or NAME/SPLIT (`compclip benchmarks` lists them); all: every "
                                 "benchmark whose files are under the data root. CLIP_benchmark's dataset names too (cifar10, "
                                 "wds/vtab/cifar10, flickr30k), a suite (datacomp, clic_zs10, elevater, vtab, vtab+, "
                                 "imagenet_robustness) or a text file of names, one a line: every set of it in one run.",
                            aliases=("--dataset",), names="benchmark")
    out: str = option(help="Folder for the <benchmark>.json results.")
    pretrained: str | None = option(None, "open_clip pretrained tag or weights file for --model.")
    data_root: str | None = option(None, "Benchmark data root (docs/data.md).  [default: $COMPCLIP_DATA]", aliases=("--dataset_root",))
    ties: str = option("official", "official (each benchmark's own rule: `compclip benchmarks`), strict (a tie is wrong, as "
                                   "sugar-crepe) or clip_benchmark (argmax: a tie goes to the option listed first), for every benchmark.")
    bench_options: dict[str, Any] = option(help="NAME.KEY=VALUE, repeatable: a benchmark's option, e.g. vl_checklist.pairs=zip "
                                                "(`compclip benchmarks`).", flag="--bench-opt", factory=dict, parse=split_options,
                                                metavar="NAME.KEY=VALUE")
    batch_size: int = option(64, "Images or captions per forward pass.", aliases=("--batch_size",))
    workers: int = option(2, "DataLoader workers decoding images.", aliases=("--num_workers",))
    cache: str | None = option(None, "Embedding cache folder, keyed by the weights, preprocessing, tokenizer, library versions and "
                                     "precision, and by each image file (path, size, mtime).")
    device: str | None = option(None, "cpu, cuda or cuda:N.  [default: cuda where torch sees a GPU, else cpu]")
    force: bool = option(False, "Replace results in --out that another model wrote (refused otherwise: one folder, one model).")
    blind: bool = option(False, "Score each benchmark a second time blind: every image embedded as the mean embedding of the "
                                "benchmark's images, so a score comes from the texts alone (the model's text prior); the result "
                                "holds it under `blind`, and `compclip report` the image-grounded part, accuracy − blind.")
    precision: str | None = option(None, "fp32, amp_bf16 or amp (fp16 autocast).  [default: amp on a GPU, as CLIP_benchmark; fp32 "
                                         "on the CPU]")
    blip_score: str | None = option(None, f"A BLIP retrieval model's score: {', '.join(BLIP_SCORES)} (ITM's match logit plus ITC's "
                                          "cosine, BLIP's own re-ranking rule and ARO's; ITM's match probability; ITC's cosine).  "
                                          f"[default: {BLIP_SCORES[0]}]")
    report_to: str = option("none", f"Comma-separated loggers of the results: {', '.join(REPORTERS)}, or none (open_clip's flag): "
                                    "every number and each benchmark's figure, and to W&B a table of the wrong items with their "
                                    "images. W&B runs offline under WANDB_MODE=offline (`wandb sync` uploads later).")
    part: str | None = option(None, "Score part i/n of the --model list (0-based: model k goes to part k mod n).  [default: a SLURM "
                                    "array task's place in its array, else every model]")
    fail_fast: bool = option(False, "Stop a --model list at the first model that cannot be scored, as one error line.  [default: each "
                                    "such model is one line, the others are scored, a summary follows, and the command exits 1]")
    wandb_project_name: str = option("compclip", "The W&B project (open_clip's flag); the run is named after --out.")

    def check_values(self) -> None:
        """The values checked by their declarations alone (benchmark names, numbers, precision), importing nothing heavy:
        the command line runs this before torch's import, so that a typo is answered at once (`eval.run.check_options`
        checks the rest: splits, options, files)."""
        from .suites import DATASET_LISTING, benchmark_item, known_names

        benchmarks = benchmark_names_of("benchmark")  # a benchmark's name is one, whatever file of that name the folder holds
        items = [item for item in map(str.strip, self.benchmark.split(",")) if item and item != "all"]
        check_names("benchmark", [item.partition("/")[0] for item in items
                                  if item.partition("/")[0] in benchmarks or benchmark_item(item) is None],
                    BENCHMARK_LISTING + DATASET_LISTING, tuple(known_names()))
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1, not {self.batch_size}")
        if self.workers < 0:
            raise UsageError(f"--workers must be 0 or more, not {self.workers}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.blip_score is not None and self.blip_score not in BLIP_SCORES:
            raise UsageError(f"--blip-score must be one of {', '.join(BLIP_SCORES)}, not {self.blip_score!r}")

    @property
    def scorer_settings(self) -> dict[str, Any]:
        """What the scorer takes of these options (its precision is resolved with the device, in `evaluate`)."""
        return {"batch_size": self.batch_size, "workers": self.workers, "cache_dir": self.cache}


# CLIP_benchmark's `eval` flags whose meaning compclip gives another flag (those of the same meaning are aliases of the
# fields above: --dataset, --dataset_root, --batch_size, --num_workers): each one's error says which compclip flag it is.
CLIP_BENCHMARK_ELSEWHERE = {
    "--output": "it names one JSON file; compclip's --out is a folder, one <benchmark>.json in it a benchmark",
    "--split": "compclip's --benchmark NAME/SPLIT scores one split (`compclip benchmarks` lists them)",
    "--task": "each compclip benchmark has its own task: --benchmark zeroshot classifies, --benchmark retrieval retrieves",
    "--pretrained_model": "compclip's --model (with --pretrained) names one model a command",
    "--no_amp": "compclip's --precision fp32 (amp is its default on a GPU, as CLIP_benchmark's)",
    "--recall_k": "compclip's --benchmark retrieval reports R@1, R@5 and R@10",
    "--fewshot_k": "compclip has no linear probe",
    "--fewshot_epochs": "compclip has no linear probe",
    "--fewshot_lr": "compclip has no linear probe",
    "--skip_load": "compclip has no linear probe; its --cache keeps the embeddings of earlier runs",
    "--feature_root": "compclip's --cache keeps the embeddings of earlier runs",
    "--save_clf": "compclip's --cache keeps the embeddings of earlier runs",
    "--load_clfs": "compclip's --cache keeps the embeddings of earlier runs",
    "--seed": "compclip's evaluation draws nothing at random (zeroshot's subset has --bench-opt zeroshot.subset_seed=N)",
    "--model_cache_dir": "open_clip's downloads go to Hugging Face's cache: set HF_HOME or HF_HUB_CACHE",
    "--annotation_file": "each compclip benchmark reads its own files under --data-root (docs/data.md)",
    "--wds_cache_dir": "each compclip benchmark reads its own files under --data-root (docs/data.md)",
    "--custom_classname_file": "compclip's --bench-opt zeroshot.classnames=FILE",
    "--custom_template_file": "compclip's --bench-opt zeroshot.templates=FILE",
    "--language": "compclip's benchmarks are scored in English",
    "--skip_existing": "compclip scores again and rewrites --out's results; --cache keeps the embeddings",
    "--model_type": "compclip loads open_clip models, hf-hub: ids, compclip checkpoint folders and transformers models (a folder, "
                    "hf:ORG/NAME) through --model",
}
