"""The model card (`README.md`) of an export: Hugging Face front matter, how the model was trained, and the newest
`compclip eval` result of each benchmark for these exact weights, with the protocol of each number."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from .. import __version__
from ..text import markdown_text

CARD_MARK = "<!-- written by compclip export -->"  # how `--force` knows a folder is an earlier export, safe to replace
_MAX_RESULT_BYTES = 4 << 20


def find_results(weights_sha256: str, roots: list[Path]) -> list[dict[str, Any]]:
    """The newest `compclip eval` record of each benchmark whose `weights_sha256` is these weights', under `roots`."""
    newest: dict[str, tuple[float, dict]] = {}
    for root in roots:
        for file in sorted(Path(root).rglob("*.json")) if Path(root).is_dir() else []:
            if file.stat().st_size > _MAX_RESULT_BYTES:
                continue
            try:
                record = json.loads(file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError, OSError):
                continue
            if not isinstance(record, dict) or record.get("weights_sha256") != weights_sha256 or "metrics" not in record:
                continue
            mtime = file.stat().st_mtime
            if record["dataset"] not in newest or mtime > newest[record["dataset"]][0]:
                newest[record["dataset"]] = (mtime, record)
    return [newest[k][1] for k in sorted(newest)]


def base_model(config: dict[str, Any]) -> str | None:
    """The Hugging Face id of the weights fine-tuning started from, where one is known."""
    name, tag = config["model_name"], config.get("pretrained")
    if name.startswith("hf-hub:"):
        return name.removeprefix("hf-hub:")
    if tag and ":" not in name and not Path(tag).exists():
        import open_clip

        hub = (open_clip.get_pretrained_cfg(name, tag) or {}).get("hf_hub", "")
        return hub.strip("/") or None
    return None


def method_options(config: dict[str, Any]) -> dict[str, Any]:
    """Every option of the checkpoint's method, the given ones and the defaults they left."""
    from ..methods import make_options
    from ..methods import method_options as options_of

    spec = config.get("method")
    if not spec:
        return {}
    given = config.get("train_args", {}).get("method_options", {})
    made = make_options(spec, [options_of(part) for part in spec.split("+")], given)
    return {k: v for opts in made for k, v in dataclasses.asdict(opts).items()}


# The license identifiers the Hub accepts in a card's `license:` (https://huggingface.co/docs/hub/repositories-licenses);
# anything else is `other` with a `license_name` (and a `license_link`).
HUB_LICENSES = frozenset((
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause", "bsd-3-clause-clear",
    "c-uda", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0", "cc-by-sa-3.0", "cc-by-sa-4.0", "cc-by-nc-2.0",
    "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-3.0", "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0",
    "cc-by-nc-sa-4.0", "cdla-sharing-1.0", "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0",
    "etalab-2.0", "eupl-1.1", "eupl-1.2", "agpl-3.0", "gfdl", "gpl", "gpl-2.0", "gpl-3.0", "lgpl", "lgpl-2.1", "lgpl-3.0", "isc",
    "h-research", "intel-research", "lppl-1.3c", "ms-pl", "apple-ascl", "apple-amlr", "mpl-2.0", "odc-by", "odbl", "openrail++",
    "osl-3.0", "postgresql", "ofl-1.1", "ncsa", "unlicense", "zlib", "pddl", "lgpl-lr", "deepfloyd-if-license", "llama2", "llama3",
    "llama3.1", "llama3.2", "llama3.3", "llama4", "gemma", "unknown", "other",
))
DEFAULT_LICENSE_NAME = "same-as-base-model"
TASKS = {"zeroshot_classification": "zero-shot-image-classification"}  # CLIP_benchmark's task -> the Hub's, where it has one


def check_license(license: str, name: str | None, link: str | None) -> None:
    """A license the Hub accepts, before anything is loaded: an identifier of its list, or `other` with a name."""
    from ..errors import UsageError

    if license not in HUB_LICENSES:
        raise UsageError(f"--license {license!r} is not one of the Hub's license identifiers (e.g. mit, apache-2.0, cc-by-4.0; "
                         "https://huggingface.co/docs/hub/repositories-licenses): give one, or --license other --license-name "
                         "NAME --license-link URL")
    if (name is not None or link is not None) and license != "other":
        raise UsageError(f"--license-name and --license-link name a license outside the Hub's list: they go with --license other, "
                         f"not {license}")


def _cell(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else markdown_text(value)


def _setting(value: Any) -> str:
    """A training setting as typed (1e-05, not a score's 0.0000); a data file by its name, not the exporter's path, and
    set as text (a file's name is anyone's: `<img onerror=...>.csv`)."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str) and ("/" in value or "\\" in value):
        return markdown_text("::".join(Path(part).name for part in value.split("::")))
    return _cell(value)


def _card_data(config: dict[str, Any], library: str, license: str, license_name: str | None, license_link: str | None, kind: str,
               title: str, results: list[dict[str, Any]]):
    """The front matter, as huggingface_hub writes and the Hub reads it: tags once each, the results as `model-index`."""
    from huggingface_hub import EvalResult, ModelCardData

    tags = list(dict.fromkeys(t for t in ["compclip", *(config.get("method") or "").split("+"), kind, "vision-language",
                                          "compositionality"] if t))
    evals = []
    for r in results:
        # "sugarcrepe/swap_att": a benchmark run on one of its parts, the Hub's dataset type and config (its `split` is
        # the data's train/test split, which a label does not name)
        name, _, part = r["dataset"].partition("/")
        for metric, value in r["metrics"].items():
            if isinstance(value, float):
                evals.append(EvalResult(task_type=TASKS.get(r.get("task")) or hub_name(str(r.get("task") or "other")),
                                        dataset_type=hub_name(name),
                                        dataset_name=" ".join(hub_name(p) for p in (name, part) if p),
                                        dataset_config=hub_name(part) if part else None, metric_type=hub_name(metric),
                                        metric_value=value,
                                        metric_name=f"{hub_name(metric)} (compclip eval {hub_name(str(r.get('compclip_version')))})"))
    other = license == "other"
    return ModelCardData(library_name=library, license=license, license_name=(license_name or DEFAULT_LICENSE_NAME) if other else None,
                         license_link=license_link if other else None, base_model=base_model(config),
                         pipeline_tag="zero-shot-image-classification", tags=tags, model_name=title if evals else None,
                         eval_results=evals or None)


def hub_name(text: str) -> str:
    """A name as the front matter's metadata holds it: letters, digits and `_.@+-` kept (`recall@5`), any other run of
    characters one `-`. The Hub shows these fields as they are (no Markdown escaping reaches them), and a result file is
    another program's text."""
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "-", text).strip("-") or "-"


def _training(config: dict[str, Any]) -> list[str]:
    args = config.get("train_args", {})
    if not args:
        return ["Not trained by compclip: these are the weights of the model named above."]
    rows = [("method", config.get("method")), ("recipe", args.get("recipe")), ("steps", config.get("step")),
            ("training data", args.get("train_data")),
            ("concepts", args.get("concepts")), ("batch size (per process)", args.get("batch_size")), ("learning rate", args.get("lr")),
            ("weight decay", args.get("weight_decay")), ("schedule", args.get("schedule")), ("warm-up steps", args.get("warmup")),
            ("precision", args.get("precision")), ("seed", args.get("seed"))]
    out = ["| setting | value |", "| --- | --- |", *(f"| {k} | {_setting(v)} |" for k, v in rows if v is not None)]
    options = method_options(config)
    if options:
        out += ["", "Method options (`docs/methods.md` gives each one's paper default):", "",
                "| option | value |", "| --- | --- |", *(f"| {k} | {_setting(v)} |" for k, v in options.items())]
    return out


def _results(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return ["No `compclip eval` result was found for these weights (`compclip export --results DIR` names where to look)."]
    out = ["| benchmark | metric | value | protocol |", "| --- | --- | --- | --- |"]
    for r in results:
        options = ", ".join(f"{k}={v}" for k, v in (r.get("options") or {}).items())
        protocol = [f"ties {r.get('ties')}", str(r.get("precision")), *([options] if options else [])]
        if not r.get("complete", True):
            protocol.append("incomplete (images or files missing)")
        protocol = ", ".join([*protocol, f"compclip {r.get('compclip_version')}"])
        for metric, value in r["metrics"].items():
            if not isinstance(value, dict):
                out.append(f"| {markdown_text(r['dataset'])} | {markdown_text(metric)} | {_cell(value)} | {markdown_text(protocol)} |")
    return out


def model_card(config: dict[str, Any], *, library: str, kind: str, license: str, usage: str, notes: list[str],
               results: list[dict[str, Any]], license_name: str | None = None, license_link: str | None = None) -> str:
    """The README.md text: huggingface_hub's `ModelCard` of the front matter and the body."""
    from huggingface_hub import ModelCard

    method = config.get("method")
    title = f"{config['model_name']} fine-tuned with compclip ({method})" if method else f"{config['model_name']}, exported by compclip"
    pretrained = config.get("pretrained")
    start = markdown_text(config["model_name"]) + (f" with pretrained weights {markdown_text(Path(pretrained).name)}" if pretrained
                                                   else " from random weights")
    data = _card_data(config, library, license, license_name, license_link, kind, title, results)
    parts = [CARD_MARK, f"# {markdown_text(title)}", "", f"Started from {start}; exported by compclip {__version__} for {library}.", ""]
    if license == "other" and not license_name:
        parts += ["License: the base model's (`compclip export --license` declares another).", ""]
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", usage)), default=0))  # longer than any run in it
    parts += ["## Use", "", f"{fence}python", usage, fence, ""]
    if notes:
        parts += ["Notes:", "", *(f"- {markdown_text(n)}" for n in notes), ""]
    parts += ["## Training", "", *_training(config), "", "## Evaluation", "",
              "The newest `compclip eval` result of each benchmark for these exact weights (matched by the SHA-256 of the "
              "checkpoint's weights file). Protocols: `compclip benchmarks` and `docs/data.md`.", "", *_results(results), ""]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n" + "\n".join(parts)))
