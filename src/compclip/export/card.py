"""The model card (`README.md`) of an export: Hugging Face front matter, how the model was trained, and the newest
`compclip eval` result of each benchmark for these exact weights, with the protocol of each number."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .. import __version__

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


def _cell(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value).replace("|", "\\|")


def _front_matter(config: dict[str, Any], library: str, license: str, kind: str) -> str:
    tags = ["compclip", *(config.get("method") or "").split("+"), kind, "vision-language", "compositionality"]
    lines = ["---", f"library_name: {library}", f"license: {license}"]
    base = base_model(config)
    if base:
        lines.append(f"base_model: {base}")
    lines += ["pipeline_tag: zero-shot-image-classification", "tags:", *(f"- {t}" for t in tags if t), "---"]
    return "\n".join(lines)


def _training(config: dict[str, Any]) -> list[str]:
    args = config.get("train_args", {})
    if not args:
        return ["Not trained by compclip: these are the weights of the model named above."]
    rows = [("method", config.get("method")), ("steps", config.get("step")), ("training data", args.get("train_data")),
            ("concepts", args.get("concepts")), ("batch size (per process)", args.get("batch_size")), ("learning rate", args.get("lr")),
            ("weight decay", args.get("weight_decay")), ("schedule", args.get("schedule")), ("warm-up steps", args.get("warmup")),
            ("precision", args.get("precision")), ("seed", args.get("seed"))]
    out = ["| setting | value |", "| --- | --- |", *(f"| {k} | {_cell(v)} |" for k, v in rows if v is not None)]
    options = method_options(config)
    if options:
        out += ["", "Method options (`docs/methods.md` gives each one's paper default):", "",
                "| option | value |", "| --- | --- |", *(f"| {k} | {_cell(v)} |" for k, v in options.items())]
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
                out.append(f"| {r['dataset']} | {metric} | {_cell(value)} | {protocol} |")
    return out


def model_card(config: dict[str, Any], *, library: str, kind: str, license: str, usage: str, notes: list[str],
               results: list[dict[str, Any]]) -> str:
    """The README.md text."""
    method = config.get("method")
    title = f"{config['model_name']} fine-tuned with compclip ({method})" if method else f"{config['model_name']}, exported by compclip"
    pretrained = config.get("pretrained")
    start = f"`{config['model_name']}`" + (f" with pretrained weights `{pretrained}`" if pretrained else " from random weights")
    parts = [_front_matter(config, library, license, kind), CARD_MARK, f"# {title}", "",
             f"Started from {start}; exported by compclip {__version__} for {library}.", "", "## Use", "", "```python", usage, "```", ""]
    if notes:
        parts += ["Notes:", "", *(f"- {n}" for n in notes), ""]
    parts += ["## Training", "", *_training(config), "", "## Evaluation", "",
              "The newest `compclip eval` result of each benchmark for these exact weights (matched by the SHA-256 of the "
              "checkpoint's weights file). Protocols: `compclip benchmarks` and `docs/data.md`.", "", *_results(results), ""]
    return "\n".join(parts)
