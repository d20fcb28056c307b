"""Exports of a compclip checkpoint where users take it: open_clip (a state dict file, or a `local-dir:` folder that
CLIP_benchmark and the hub read too) and Hugging Face transformers (`CLIPModel`, `SiglipModel`: what LLaVA-style
code loads), each folder with a model card."""
from __future__ import annotations

import functools
from pathlib import Path

from ..errors import UsageError
from ..extras import need
from ..io import atomic_dir
from ..progress import Stages
from .card import CARD_MARK, check_license, find_results, model_card

FORMATS = ("open_clip", "hf")
CARD_NAME = "README.md"


def export_target(out: str | Path, force: bool = False) -> Path:
    """The single `.safetensors` file an open_clip export writes; an existing file only with `force`."""
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"{target} is a folder: name the .safetensors file to write")
    if target.exists() and not force:
        raise UsageError(f"{target} exists: pass --force to overwrite it")
    return target


def _check_folder(out: Path, force: bool) -> None:
    """An export folder is new or empty; with `force`, an earlier export (its card says so) is replaced; nothing else is."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UsageError(f"{out} is a file: an export folder goes there (name a .safetensors file for the single-file open_clip export)")
    if not any(out.iterdir()):
        return
    card = out / CARD_NAME
    earlier = card.is_file() and CARD_MARK in card.read_text(encoding="utf-8", errors="replace")
    if not earlier:
        raise UsageError(f"{out} holds files that no compclip export wrote: choose a new or empty folder")
    if not force:
        raise UsageError(f"{out} holds an earlier export: pass --force to replace it")


def _results_roots(checkpoint: Path, results: list[Path]) -> list[Path]:
    """Where eval results are looked for: `results`, else the run folder that holds the checkpoint and `results/` in
    the working folder, where the README's examples write them (`compclip eval ... --out results/c2lip`): a result
    counts only for the same weights (its `weights_sha256`), so a wider search cannot borrow another model's."""
    from ..models.checkpoint import RunFolder

    return results or [RunFolder.holding(checkpoint), Path("results")]


def export(checkpoint: str | Path, out: str | Path, fmt: str = "open_clip", *, force: bool = False, results: list[Path] | None = None,
           license: str = "other", license_name: str | None = None, license_link: str | None = None,
           push_to_hub: str | None = None) -> tuple[Path, str, list[str]]:
    """Write `checkpoint` for `fmt` at `out`; returns what was written, the Python that loads it, and what a user must know.

    `fmt` open_clip with `out` a `.safetensors` file writes the state dict alone; any other `out` is a folder with the
    weights, their config, the tokenizer (where it has a counterpart) and `README.md`, the model card, which
    `push_to_hub` (a Hub repository id) then uploads.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: {', '.join(FORMATS)}")
    check_license(license, license_name, license_link)
    # the destination is checked before torch and open_clip load: a wrong one is an error in a fraction of a second
    single_file = str(out).endswith(".safetensors")
    if single_file:
        if fmt != "open_clip":
            raise UsageError(f"{out}: --format {fmt} writes a folder, not a .safetensors file")
        if push_to_hub:
            raise UsageError(f"--push-to-hub uploads an export folder with its model card: name a folder, not {out}")
        target = export_target(out, force)
    else:
        out = Path(out)
        _check_folder(out, force)
        if fmt == "hf":
            need("transformers", "--format hf")
    from ..models import load_model
    from ..models.checkpoint import check_checkpoint_folder, checkpoint_folder, weights_sha256
    from .openclip import export_open_clip, folder_usage, method_notes, write_open_clip_folder

    checkpoint = checkpoint_folder(checkpoint)  # a run folder or its `latest`: the newest step
    config = check_checkpoint_folder(checkpoint)
    if single_file:
        return target, export_open_clip(checkpoint, target), []
    with Stages(f"export {fmt} (load, convert and check, card)", 3) as stage, atomic_dir(out) as tmp:
        model, _, tokenizer = load_model(str(checkpoint))
        notes = method_notes(config)
        stage.done()
        if fmt == "hf":
            from . import hf

            kind, hf_notes = hf.save(model, config, tokenizer, tmp)
            processor = "AutoProcessor" if (tmp / "tokenizer_config.json").is_file() else "AutoImageProcessor"
            usage = functools.partial(hf_usage, kind, processor)
            notes += hf_notes
            library = "transformers"
        else:
            kind = "clip" if config["model_cfg"].get("init_logit_bias") is None else "siglip"
            notes += write_open_clip_folder(checkpoint, tmp, tokenizer)
            usage = functools.partial(folder_usage, config["model_name"])
            library = "open_clip"
        stage.done()
        found = find_results(weights_sha256(model), _results_roots(checkpoint, list(results or [])))
        where = push_to_hub or out.name  # the card names the Hub repository or the folder, not the exporter's path to it
        card = model_card(config, library=library, kind=kind, license=license, usage=usage(where), notes=notes, results=found,
                          license_name=license_name, license_link=license_link)
        (tmp / CARD_NAME).write_text(card, encoding="utf-8")
        stage.done()
    if push_to_hub:
        notes.append(f"pushed to https://huggingface.co/{push(out, push_to_hub, config)}")
    return out, usage(out), notes


def hf_usage(kind: str, processor: str, shown: str | Path) -> str:
    """The Python that loads a transformers export of `kind` (clip, siglip) from `shown`, the path a string literal of it
    (`repr`), as every path a user pastes is."""
    cls = "CLIPModel" if kind == "clip" else "SiglipModel"
    usage = (f"from transformers import {processor}, {cls}\nmodel = {cls}.from_pretrained({str(shown)!r})\n"
             f"processor = {processor}.from_pretrained({str(shown)!r}, backend='pil')  # PIL: open_clip's exact pixels")
    if kind == "clip":
        usage += (f"\n# LLaVA-style: CLIPVisionModel.from_pretrained({str(shown)!r}) and its hidden_states[-2], "
                  f"CLIPImageProcessor.from_pretrained({str(shown)!r})")
    return usage


def upload_arguments(out: Path, repo: str, config: dict) -> dict:
    """What `huggingface_hub.upload_folder` is given: the whole export folder, as one commit that names the checkpoint."""
    step = f" step {config['step']}" if config.get("step") is not None else ""
    method = f" ({config['method']})" if config.get("method") else ""
    return {"repo_id": repo, "folder_path": str(out), "repo_type": "model",
            "commit_message": f"compclip export of {config['model_name']}{method}{step}"}


def push(out: Path, repo: str, config: dict) -> str:
    """Upload the export folder to the Hub repository `repo` (made if it is not there; the token is huggingface_hub's own:
    HF_TOKEN or `hf auth login`); a failure is one line, the export kept."""
    import huggingface_hub

    try:
        huggingface_hub.create_repo(repo, repo_type="model", exist_ok=True)
        huggingface_hub.upload_folder(**upload_arguments(out, repo, config))
    except Exception as e:  # offline, no token, no rights: huggingface_hub raises several kinds
        from ..errors import DownloadError

        raise DownloadError(f"--push-to-hub {repo}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; the export is "
                            f"written at {out}: push it later with `hf upload {repo} {out}`") from None
    return repo
