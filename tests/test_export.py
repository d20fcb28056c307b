"""Exports, checked against open_clip itself: the open_clip file and `local-dir:` folder, the transformers folder
(CLIPModel, SiglipModel, CLIPVisionModel as LLaVA reads it, the processors), the model card, and the QuickGELU guard."""
import copy
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import open_clip
import pytest
import timm
import torch
import torch.nn.functional as F
from open_clip.model import CLIP, CustomTextCLIP
from PIL import Image
from safetensors.torch import save_file

from compclip.errors import UsageError
from compclip.export import export
from compclip.export import hf as to_hf
from compclip.export.openclip import export_open_clip
from compclip.models import BUNDLED_MODELS, bundled, load_model, save_checkpoint
from conftest import run_main
from test_models import assert_same_outputs
from test_train import make_dataset

CAPTIONS = ["a red couch next to a white table.", "A white couch, next to a red table!", "two dogs & a cat"]
ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


@pytest.fixture
def cli(capsys, monkeypatch):
    """`compclip -q ARGS` through the command line's entry point in this process, with `ENV` set: exit code, stdout and
    stderr as a `CompletedProcess`, the command's alone, as a process of its own would give them (what the test printed
    before, e.g. open_clip's warning as it built a model, is read off first)."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)

    def cli(*args):
        capsys.readouterr()
        return subprocess.CompletedProcess(args, *run_main(capsys, "-q", *args))

    return cli


# ---- open_clip -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_export_loads_in_plain_open_clip_with_identical_embeddings(tmp_path, name):
    model, _, tokenizer = load_model(name)
    folder = save_checkpoint(model, tmp_path / "ckpt")
    usage = export_open_clip(folder, tmp_path / "plain.safetensors")
    assert f"open_clip.create_model_and_transforms('{name}', pretrained='{tmp_path / 'plain.safetensors'}')" in usage
    scope = {}
    exec(usage, scope)  # the printed lines, run as a user pastes them, imports and all: model and tokenizer from open_clip alone
    # get_tokenizer would reach for SigLIP's hub tokenizer: the line names the tokenizer class
    assert isinstance(scope["tokenizer"], open_clip.tokenizer.HFTokenizer if name in bundled.HF_TOKENIZED else open_clip.SimpleTokenizer)
    assert_same_outputs(model, scope["model"].eval(), tokenizer, scope["tokenizer"])


def test_export_names_the_forces_open_clip_needs(tmp_path):
    model, _, _ = load_model("compclip-tiny-clip", force_quick_gelu=True, force_context_length=32)
    usage = export_open_clip(save_checkpoint(model, tmp_path / "ckpt"), tmp_path / "x.safetensors")
    assert "force_quick_gelu=True" in usage and "force_context_length=32" in usage
    plain = open_clip.create_model(
        "compclip-tiny-clip", pretrained=str(tmp_path / "x.safetensors"), force_quick_gelu=True, force_context_length=32
    )
    assert_same_outputs(model, plain.eval(), *[load_model("compclip-tiny-clip", force_context_length=32)[2]] * 2)


@pytest.mark.parametrize("name", [n for n in BUNDLED_MODELS if n != "compclip-tiny-siglip-conv"])
def test_the_open_clip_folder_loads_by_local_dir_with_its_tokenizer(tmp_path, name):
    model, _, tokenizer = load_model(name, init_seed=3)
    out, usage, _ = export(save_checkpoint(model, tmp_path / "ckpt"), tmp_path / "out")
    assert "local-dir:" in usage and (out / "open_clip_config.json").is_file() and (out / "README.md").is_file()
    scope = {}
    exec(usage, scope)  # its own imports
    assert torch.equal(scope["tokenizer"](CAPTIONS), tokenizer(CAPTIONS))  # the HF tokenizer from the folder's own files
    assert_same_outputs(model, scope["model"].eval(), tokenizer, scope["tokenizer"])


def test_the_printed_snippet_loads_a_folder_whose_name_has_a_space_an_accent_and_a_newline(tmp_path, capsys):
    """`compclip export` prints the Python that loads the export: the folder's path is a string literal there, whatever
    its name holds, and the `wrote` line stays one line; the snippet, run as printed, loads the same model."""
    model, _, tokenizer = load_model("compclip-tiny-clip", init_seed=4)
    out = tmp_path / "my export é\nsecond line"
    code, printed, err = run_main(capsys, "export", save_checkpoint(model, tmp_path / "ckpt"), out)
    assert code in (0, None), err
    lines = printed.splitlines()
    assert lines[0] == f"wrote {str(out)!r}; load it with:"
    snippet = "\n".join(line for line in lines[1:] if not line.startswith("note: "))
    assert f"create_model_and_transforms({'local-dir:' + str(out)!r})" in snippet
    scope = {}
    exec(snippet, scope)
    assert_same_outputs(model, scope["model"].eval(), tokenizer, scope["tokenizer"])
    assert f"create_model_and_transforms({'local-dir:' + out.name!r})" in (out / "README.md").read_text()  # the card: its name


# what a fresh process runs after the printed snippet: the unit embeddings of the pixels and captions in INPUTS, as JSON
OPEN_CLIP_EMBEDS = """
import json, sys, torch
inputs = torch.load(sys.argv[1])
with torch.no_grad():
    embeds = model.eval().encode_image(inputs["pixels"], normalize=True), model.encode_text(tokenizer(inputs["captions"]), normalize=True)
print(json.dumps([e.tolist() for e in embeds]))
"""
HF_EMBEDS = """
import json, sys, torch
inputs = torch.load(sys.argv[1])
with torch.no_grad():
    embeds = model.eval().get_image_features(pixel_values=inputs["pixels"]), model.get_text_features(input_ids=inputs["ids"])
print(json.dumps([torch.nn.functional.normalize(getattr(e, "pooler_output", e), dim=-1).tolist() for e in embeds]))
"""


def _printed_snippet(stdout: str) -> str:
    """The Python `compclip export` printed under its `wrote ...; load it with:` line, without its notes."""
    lines = stdout.splitlines()
    assert lines[0].startswith("wrote ") and lines[0].endswith("; load it with:"), stdout
    return "\n".join(line for line in lines[1:] if not line.startswith("note: "))


def _embeds_in_a_fresh_process(snippet: str, check: str, model, tokenizer, tmp_path) -> None:
    """Run `snippet` then `check` in a new Python process, as a user pastes the printed lines into a new session, and
    hold what it embeds to `model`'s own unit embeddings (the same weights and kernels: within a few float32 ulps of 1)."""
    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(11))
    inputs = tmp_path / "inputs.pt"
    torch.save({"pixels": pixels, "captions": CAPTIONS, "ids": tokenizer(CAPTIONS)}, inputs)
    ran = subprocess.run([sys.executable, "-c", snippet + "\n" + check, str(inputs)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    with torch.no_grad():
        ours = model.eval().encode_image(pixels, normalize=True), model.encode_text(tokenizer(CAPTIONS), normalize=True)
    for a, b in zip(ours, json.loads(ran.stdout.splitlines()[-1]), strict=True):
        assert (a - torch.tensor(b)).abs().max() < 1e-5


@pytest.mark.parametrize("fmt, out, check", [("open_clip", "folder", OPEN_CLIP_EMBEDS),
                                             ("open_clip", "weights.safetensors", OPEN_CLIP_EMBEDS), ("hf", "hf", HF_EMBEDS)])
def test_the_printed_snippet_loads_a_bundled_models_export_in_a_fresh_process(tmp_path, cli, fmt, out, check):
    """compclip-tiny-siglip's image trunk is a timm model compclip registers: the lines `compclip export` prints load it in
    a Python process that has imported nothing else, for each format it prints lines for."""
    model, _, tokenizer = load_model("compclip-tiny-siglip", init_seed=8)
    exported = cli("export", save_checkpoint(model, tmp_path / "ckpt"), tmp_path / out, "--format", fmt)
    assert exported.returncode == 0, exported.stderr[-2000:]
    _embeds_in_a_fresh_process(_printed_snippet(exported.stdout), check, model, tokenizer, tmp_path)


def _contents(folder) -> dict:
    """What each file of an export folder holds: a safetensors file's tensors and metadata (whose header's key order
    varies from one write to the next), any other file's bytes."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    def held(path):
        if path.suffix != ".safetensors":
            return path.read_bytes()
        with safe_open(path, "pt") as f:
            metadata = f.metadata()
        return metadata, {name: tensor.numpy().tobytes() for name, tensor in load_file(path).items()}

    return {p.name: held(p) for p in sorted(folder.iterdir())}


def test_an_export_killed_while_it_replaces_an_earlier_one_leaves_that_one_whole(tmp_path, cli):
    """`export --force` SIGKILLed as it writes (a kill runs no `finally`): the folder holds the earlier export as it was
    (or, had the kill come after the rename, the whole new one), never a mix, and it loads through the lines printed
    when it was written; the next export removes what the killed one left beside it."""
    import signal

    from compclip.export.openclip import FOLDER_WEIGHTS_NAME

    model, _, tokenizer = load_model("compclip-tiny-siglip", init_seed=9)
    first = cli("export", save_checkpoint(model, tmp_path / "ckpt"), tmp_path / "out")
    assert first.returncode == 0, first.stderr[-2000:]
    newer = save_checkpoint(load_model("compclip-tiny-siglip", init_seed=10)[0], tmp_path / "newer")
    assert cli("export", newer, tmp_path / "whole" / "out").returncode == 0  # what the new export writes, whole
    earlier, whole = _contents(tmp_path / "out"), _contents(tmp_path / "whole" / "out")
    written = (tmp_path / "out" / FOLDER_WEIGHTS_NAME).stat()
    writer = subprocess.Popen([sys.executable, "-m", "compclip", "-q", "export", str(newer), str(tmp_path / "out"), "--force"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def writing() -> bool:  # the new weights being written: in a folder beside OUT, or (were it written in place) in OUT
        if any(tmp_path.glob(f".out.*/{FOLDER_WEIGHTS_NAME}")):
            return True
        try:
            now = (tmp_path / "out" / FOLDER_WEIGHTS_NAME).stat()
        except FileNotFoundError:
            return True
        return (now.st_ino, now.st_mtime_ns) != (written.st_ino, written.st_mtime_ns)

    while not writing():
        assert writer.poll() is None, writer.stderr.read()[-2000:]
    os.kill(writer.pid, signal.SIGKILL)
    assert writer.wait() == -signal.SIGKILL
    left = _contents(tmp_path / "out")
    assert left in (earlier, whole), sorted(left)
    if left == earlier:
        _embeds_in_a_fresh_process(_printed_snippet(first.stdout), OPEN_CLIP_EMBEDS, model, tokenizer, tmp_path)
    again = cli("export", newer, tmp_path / "out", "--force")
    assert again.returncode == 0, again.stderr[-2000:]
    assert _contents(tmp_path / "out") == whole
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # the killed export's folders removed


# ---- transformers: every open_clip architecture maps, or says which part does not ----------------------------------


def _toy(name: str) -> torch.nn.Module:
    """`name`'s architecture with every flag it sets (activation, norms, pooling, head, patch and image size), at
    2 blocks of width 64: the same open_clip and timm classes, built in a second."""
    cfg = copy.deepcopy(open_clip.get_model_config(name))
    cfg["text_cfg"].update(layers=2, width=64, heads=2)
    cfg["text_cfg"].pop("hf_tokenizer_name", None)
    cfg["embed_dim"] = 64
    if not cfg["vision_cfg"].get("timm_model_name"):
        cfg["vision_cfg"].update(layers=2, width=64, head_width=32)
    cls = CustomTextCLIP if cfg.get("custom_text") else CLIP
    create = timm.create_model

    def small_timm(model_name, pretrained=False, **kwargs):
        return create(model_name, pretrained=False, **kwargs, depth=2, embed_dim=64, num_heads=2)

    open_clip.timm_model.timm.create_model = small_timm
    try:
        torch.manual_seed(0)
        return cls(**{k: v for k, v in cfg.items() if k in inspect.signature(cls).parameters}).eval()
    finally:
        open_clip.timm_model.timm.create_model = create


def _is_vit(name: str) -> bool:
    cfg = open_clip.get_model_config(name)
    vision, timm_name = cfg.get("vision_cfg", {}), cfg.get("vision_cfg", {}).get("timm_model_name") or ""
    plain_vit = not timm_name and isinstance(vision.get("layers"), int)
    return (plain_vit or "siglip" in timm_name) and "multimodal_cfg" not in cfg and not cfg["text_cfg"].get("hf_model_name") and \
        not timm_name.startswith("compclip")


VITS = [n for n in open_clip.list_models() if _is_vit(n)]
# what transformers' CLIPModel / SiglipModel cannot hold, and the part the refusal names
UNMAPPABLE = {"CLIPA": "pool_type 'avg'", "ViT-M-16-alt": "layer scale", "SO400M-16-SigLIP-i18n": "no biased linear projection",
              "H-14-worldwide": "end-of-text id 2", "bigG-14-worldwide": "end-of-text id 2"}


def _expected_refusal(name: str) -> str | None:
    return next((part for key, part in UNMAPPABLE.items() if key in name), None)


@pytest.mark.parametrize("name", VITS)
def test_every_open_clip_vit_config_converts_to_equal_embeddings_or_names_what_does_not_map(name):
    model = _toy(name)
    refusal = _expected_refusal(name)
    if refusal:
        with pytest.raises(to_hf.UnmappableError, match=refusal):
            to_hf.convert(model)
        return
    hf, kind = to_hf.convert(model)
    assert kind == ("siglip" if "SigLIP" in name else "clip")
    size = hf.config.vision_config.image_size
    images = torch.rand(3, 3, size, size, generator=torch.Generator().manual_seed(5)) * 4 - 2
    ids = torch.randint(0, hf.config.text_config.vocab_size - 1, (3, hf.config.text_config.max_position_embeddings))
    if kind == "clip":  # each caption ends in the end-of-text id, padded with 0 after it, as open_clip tokenizes
        for row, end in zip(ids, (5, 20, ids.shape[1] - 1), strict=True):
            row[end], row[end + 1 :] = hf.config.text_config.eos_token_id, 0
    with torch.no_grad():
        ours = model.encode_image(images), model.encode_text(ids)
        theirs = hf.get_image_features(pixel_values=images), hf.get_text_features(input_ids=ids)
    for a, b in zip(ours, theirs, strict=True):
        b = getattr(b, "pooler_output", b)
        assert a.shape == b.shape and (F.normalize(a, dim=-1) - F.normalize(b, dim=-1)).abs().max() < 1e-5


@pytest.mark.parametrize("name, part", [("RN50", "ModifiedResNet is not a ViT"), ("compclip-tiny-siglip-conv", "patch embedding ConvStem")])
def test_an_architecture_transformers_cannot_hold_is_one_error_line_naming_the_part(tmp_path, cli, name, part):
    model, _, _ = load_model(name)
    ckpt = save_checkpoint(model, tmp_path / "ckpt")
    result = cli("export", ckpt, tmp_path / "hf", "--format", "hf")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1 and part in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "hf").exists()


# ---- transformers: the folder as its users load it -------------------------------------------------------------------


SIZES = [(300, 400), (333, 501), (64, 64), (90, 100)]  # at 64 px: long sides 85, 96, 64 and 71, a crop margin of 7 for the last


def _photos(tmp_path):
    """Real photos of odd sizes, saved as JPEG or PNG and decoded."""
    rng, files = np.random.default_rng(0), []
    for i, (h, w) in enumerate(SIZES):
        file = tmp_path / f"{i}.{'jpg' if i % 2 else 'png'}"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(file)
        files.append(file)
    return [Image.open(f).convert("RGB") for f in files]


def _floored_crop(preprocess, photo):
    """open_clip's preprocessing with the centre crop's offset floored, as transformers' processors place it
    (torchvision rounds half to even: a margin of 3 mod 4 pixels puts the crop one pixel further)."""
    import torchvision.transforms.functional as TF

    resize, _, *rest = preprocess.transforms
    image = resize(photo)
    size = 64
    top, left = (image.height - size) // 2, (image.width - size) // 2
    cropped = TF.crop(image, top, left, size, size)
    for t in rest:
        cropped = t(cropped)
    return cropped


@pytest.fixture(scope="module")
def clip_export(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clip")
    model, preprocess, tokenizer = load_model("compclip-tiny-clip", force_quick_gelu=True, init_seed=4)
    out, _, notes = export(save_checkpoint(model, tmp / "ckpt"), tmp / "hf", "hf")
    return model, preprocess, tokenizer, out, notes


def test_clip_model_embeds_as_open_clip_and_the_processor_makes_its_pixels(clip_export, tmp_path):
    from transformers import AutoProcessor, CLIPModel

    model, preprocess, tokenizer, out, notes = clip_export
    assert json.loads((out / "config.json").read_text())["text_config"]["hidden_act"] == "quick_gelu"
    hf = CLIPModel.from_pretrained(out).eval()
    photos = _photos(tmp_path)
    exact = AutoProcessor.from_pretrained(out, backend="pil")
    pixels = exact(images=photos, return_tensors="pt")["pixel_values"]
    assert torch.equal(pixels[:3], torch.stack([preprocess(p) for p in photos[:3]]))  # resize, crop, scale: open_clip's to the bit
    assert not torch.equal(pixels[3], preprocess(photos[3])) and torch.equal(pixels[3], _floored_crop(preprocess, photos[3]))
    assert any("centre crop" in n for n in notes)  # the one difference, said where users read
    default = AutoProcessor.from_pretrained(out)(images=photos, return_tensors="pt")["pixel_values"]
    assert (default - pixels).abs().max() <= 1 / 255 / min(open_clip.OPENAI_DATASET_STD) + 1e-6  # its own uint8 rounding
    ids = exact(text=CAPTIONS, padding="max_length", max_length=77, truncation=True, return_tensors="pt")["input_ids"]
    ours = tokenizer(CAPTIONS)
    assert torch.equal(ids[ours != 0], ours[ours != 0])  # the same ids; transformers pads with end-of-text, open_clip with 0
    with torch.no_grad():
        a = model.encode_image(pixels, normalize=True), model.encode_text(ours, normalize=True)
        b = hf.get_image_features(pixel_values=pixels), hf.get_text_features(input_ids=ids)
    for x, y in zip(a, b, strict=True):
        assert (x - F.normalize(getattr(y, "pooler_output", y), dim=-1)).abs().max() < 1e-5
    assert hf.logit_scale.item() == pytest.approx(model.logit_scale.item())
    assert any("checked: image and text embeddings equal open_clip's" in n for n in notes)


def test_llava_reads_the_penultimate_layer_of_clip_vision_model(clip_export, tmp_path):
    from transformers import CLIPImageProcessor, CLIPVisionModel

    model, _, _, out, _ = clip_export
    photos = _photos(tmp_path)
    pixels = CLIPImageProcessor.from_pretrained(out)(images=photos, return_tensors="pt")["pixel_values"]  # as LLaVA loads it
    blocks = model.visual.transformer.resblocks
    seen = {}
    hook = blocks[len(blocks) - 2].register_forward_hook(lambda m, i, o: seen.setdefault("penultimate", o))
    with torch.no_grad():
        model.encode_image(pixels)
        states = CLIPVisionModel.from_pretrained(out).eval()(pixel_values=pixels, output_hidden_states=True).hidden_states
    hook.remove()
    assert len(states) == len(blocks) + 1
    assert (states[-2] - seen["penultimate"]).abs().max() < 1e-5  # what LLaVA's CLIPVisionTower feeds its projector


def test_the_towers_with_projection_load_at_a_width_other_than_512(clip_export):
    """What diffusers and SDXL load: each tower alone with its projection, sized by its own sub-config."""
    from transformers import AutoTokenizer, CLIPTextModelWithProjection, CLIPVisionModelWithProjection

    model, _, tokenizer, out, _ = clip_export
    assert model.text_projection.shape[1] == 64
    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    ids = AutoTokenizer.from_pretrained(out)(CAPTIONS, padding="max_length", max_length=77, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        image = CLIPVisionModelWithProjection.from_pretrained(out).eval()(pixel_values=pixels).image_embeds
        text = CLIPTextModelWithProjection.from_pretrained(out).eval()(input_ids=ids).text_embeds
        assert (image - model.encode_image(pixels)).abs().max() < 1e-5
        assert (text - model.encode_text(tokenizer(CAPTIONS))).abs().max() < 1e-5


def test_the_tokenizer_files_are_those_every_transformers_reads(clip_export):
    """vocab.json and merges.txt, no tokenizer.json (4.x's tokenizers cannot parse 5.x's), no processor_config.json."""
    from transformers import CLIPTokenizer

    _, _, tokenizer, out, _ = clip_export
    files = {p.name for p in out.iterdir()}
    assert {"vocab.json", "merges.txt", "preprocessor_config.json"} <= files
    assert not files & {"tokenizer.json", "processor_config.json"}
    ids = CLIPTokenizer.from_pretrained(out)(CAPTIONS, padding="max_length", max_length=77)["input_ids"]
    ours = tokenizer(CAPTIONS)
    assert torch.equal(torch.tensor(ids)[ours != 0], ours[ours != 0])


# Exports promise to load in transformers 4.40 and later (LLaVA's own code pins 4.x), older than the 5.4 compclip itself
# needs to write them: `make test` installs 4.40.2 into a folder of its own (.venv/transformers-4.40) and names it here;
# COMPCLIP_TRANSFORMERS_FLOOR_PYTHON names a whole other environment instead.
EXPORT_FLOOR = "4.40"
FLOOR_PATH = os.environ.get("COMPCLIP_TRANSFORMERS_FLOOR_PATH")
FLOOR_PYTHON = os.environ.get("COMPCLIP_TRANSFORMERS_FLOOR_PYTHON") or (sys.executable if FLOOR_PATH else None)
FLOOR_SCRIPT = """
import json, sys, torch, transformers
from transformers import AutoProcessor, AutoTokenizer, CLIPModel, CLIPTextModelWithProjection, CLIPVisionModelWithProjection
clip, siglip, pixels = sys.argv[1], sys.argv[2], torch.load(sys.argv[3])
captions, canonical = json.loads(sys.argv[4]), json.loads(sys.argv[5])
ids = AutoTokenizer.from_pretrained(clip)(captions, padding="max_length", max_length=77, return_tensors="pt")["input_ids"]
with torch.no_grad():
    model = CLIPModel.from_pretrained(clip).eval()
    out = {"version": transformers.__version__, "ids": ids.tolist(),
           "image": CLIPVisionModelWithProjection.from_pretrained(clip).eval()(pixel_values=pixels).image_embeds.tolist(),
           "text": CLIPTextModelWithProjection.from_pretrained(clip).eval()(input_ids=ids).text_embeds.tolist(),
           "pixels": AutoProcessor.from_pretrained(clip).image_processor.crop_size["height"],
           "siglip_ids": AutoTokenizer.from_pretrained(siglip)(canonical)["input_ids"],
           "siglip_image": transformers.SiglipModel.from_pretrained(siglip).eval().get_image_features(pixel_values=pixels).tolist()}
print(json.dumps(out))
"""


@pytest.mark.skipif(FLOOR_PYTHON is None and not os.environ.get("CI"), reason="no transformers 4.40 named (`make test` names it)")
def test_the_oldest_transformers_an_export_promises_loads_both_exports(clip_export, tmp_path):
    """With transformers 4.40 (the oldest an export promises, docs/guide.md), both exports load and embed as open_clip."""
    assert FLOOR_PYTHON is not None, "CI runs `make test`, which installs transformers 4.40 for this test"
    model, _, tokenizer, out, _ = clip_export
    siglip, _, siglip_tokenizer = load_model("compclip-tiny-siglip-hf", init_seed=5)
    siglip_out, _, _ = export(save_checkpoint(siglip, tmp_path / "ckpt"), tmp_path / "hf", "hf")
    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    torch.save(pixels, tmp_path / "pixels.pt")
    result = subprocess.run([FLOOR_PYTHON, "-c", FLOOR_SCRIPT, str(out), str(siglip_out), str(tmp_path / "pixels.pt"), json.dumps(CAPTIONS),
                             json.dumps([open_clip.tokenizer.canonicalize_text(c) for c in CAPTIONS])],
                            capture_output=True, text=True, env={**os.environ, **ENV, **({"PYTHONPATH": FLOOR_PATH} if FLOOR_PATH else {})})
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.splitlines()[-1])
    assert got["version"].startswith(EXPORT_FLOOR + ".")
    ours = tokenizer(CAPTIONS)
    assert torch.equal(torch.tensor(got["ids"])[ours != 0], ours[ours != 0])
    assert got["siglip_ids"] == [[t for t in row if t != 0] for row in siglip_tokenizer(CAPTIONS).tolist()]  # padding aside
    with torch.no_grad():
        assert (torch.tensor(got["image"]) - model.encode_image(pixels)).abs().max() < 1e-5
        assert (torch.tensor(got["text"]) - model.encode_text(ours)).abs().max() < 1e-5
        assert (torch.tensor(got["siglip_image"]) - siglip.encode_image(pixels)).abs().max() < 1e-5


def test_siglip_model_embeds_as_open_clip_through_its_tokenizer_and_processor(tmp_path):
    from transformers import AutoProcessor, SiglipModel

    model, preprocess, tokenizer = load_model("compclip-tiny-siglip-hf", init_seed=5)
    out, _, notes = export(save_checkpoint(model, tmp_path / "ckpt"), tmp_path / "hf", "hf")
    assert any("canonicalize_text" in n for n in notes) and any("padding='max_length'" in n for n in notes)
    hf, processor = SiglipModel.from_pretrained(out).eval(), AutoProcessor.from_pretrained(out, backend="pil")
    photos = _photos(tmp_path)
    cleaned = [open_clip.tokenizer.canonicalize_text(c) for c in CAPTIONS]  # as the notes say
    batch = processor(text=cleaned, images=photos, padding="max_length", max_length=64, truncation=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "pixel_values"}  # no attention mask: SigLIP attends to its padding
    assert torch.equal(batch["input_ids"], tokenizer(CAPTIONS))
    assert torch.equal(batch["pixel_values"][:3], torch.stack([preprocess(p) for p in photos[:3]]))
    with torch.no_grad():
        ours = model(batch["pixel_values"], tokenizer(CAPTIONS))
        theirs = hf(**batch)
    assert (ours[0] - theirs.image_embeds).abs().max() < 1e-5 and (ours[1] - theirs.text_embeds).abs().max() < 1e-5
    logits = ours[2] * ours[0] @ ours[1].T + ours[3]  # open_clip's sigmoid logits, image by text
    assert (logits - theirs.logits_per_image).abs().max() < 1e-4
    text = json.loads((out / "config.json").read_text())["text_config"]  # every special id within the vocabulary: transformers'
    ids = {k: v for k, v in text.items() if k.endswith("_token_id")}     # bos/eos warning on loading comes from its own defaults
    assert ids and all(0 <= v < text["vocab_size"] for v in ids.values()), ids


# ---- a fine-tuned checkpoint, end to end on the command line -----------------------------------------------------------


def test_a_fine_tuned_checkpoint_goes_through_the_cli_into_transformers_with_its_scores_in_the_card(tmp_path, cli):
    from huggingface_hub import ModelCard
    from transformers import CLIPModel

    data = make_dataset(tmp_path, n=16)
    trained = cli("train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data", data, "--out", tmp_path / "run",
                  "--batch-size", 8, "--steps", 2, "--save-every", 1, "--workers", 0, "--lr", "1e-3")
    assert trained.returncode == 0, trained.stderr[-2000:]
    ckpt = tmp_path / "run" / "checkpoints" / "step_0000002"
    world = cli("world", "generate", "--out", tmp_path / "world", "--n-train", 8, "--n-val", 2, "--n-test", 8, "--size", 64, "--workers", 1)
    assert world.returncode == 0, world.stderr[-2000:]
    evaluated = cli("eval", "--model", ckpt, "--benchmark", "zeroshot", "--data-root", tmp_path / "world" / "test_seen",
                    "--out", tmp_path / "run" / "eval", "--workers", 0, "--device", "cpu")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    record = json.loads((tmp_path / "run" / "eval" / "zeroshot.json").read_text())

    exported = cli("export", ckpt, tmp_path / "hf", "--format", "hf", "--license", "mit")
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert "CLIPModel.from_pretrained" in exported.stdout and "note: tokenizer:" in exported.stdout
    card = (tmp_path / "hf" / "README.md").read_text()
    parsed = ModelCard.load(tmp_path / "hf" / "README.md").data  # as the Hub reads it
    assert (parsed.library_name, parsed.license, parsed.tags.count("clip")) == ("transformers", "mit", 1)
    assert "| method | clip |" in card and "| steps | 2 |" in card and "| training data | train.csv |" in card
    assert "| learning rate | 0.001 |" in card and str(tmp_path) not in card  # the exporter's paths stay on their machine
    scores = {k: v for k, v in record["metrics"].items() if isinstance(v, float)}
    for metric, value in scores.items():  # the run folder's eval results for these weights, with their protocol
        assert f"| zeroshot | {metric} | {value:.4f} | ties {record['ties']}, fp32" in card
    index = {(e.dataset_name, e.metric_type): e.metric_value for e in parsed.eval_results}
    assert index == {("zeroshot", k): v for k, v in scores.items()}  # model-index, each result under its dataset's name
    assert {e.task_type for e in parsed.eval_results} == {"zero-shot-image-classification"}

    model, _, tokenizer = load_model(str(ckpt))
    hf = CLIPModel.from_pretrained(tmp_path / "hf").eval()
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model.encode_image(images, normalize=True), model.encode_text(tokenizer(CAPTIONS), normalize=True)
        theirs = hf.get_image_features(pixel_values=images), hf.get_text_features(input_ids=tokenizer(CAPTIONS))
    for a, b in zip(ours, theirs, strict=True):
        assert (a - F.normalize(getattr(b, "pooler_output", b), dim=-1)).abs().max() < 1e-5
    # other weights, other card: nothing evaluated the first step's
    assert cli("export", ckpt.parent / "step_0000001", tmp_path / "first", "--format", "hf").returncode == 0
    assert "No `compclip eval` result was found" in (tmp_path / "first" / "README.md").read_text()


def test_the_card_parses_as_the_hub_parses_it_for_odd_licenses_and_paths(tmp_path, capsys):
    from huggingface_hub import ModelCard

    from compclip.export import upload_arguments

    odd = tmp_path / "data: #1 'quoted'"
    odd.mkdir()
    data = make_dataset(odd, n=16)
    assert run_main(capsys, "train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data", data, "--out",
                    tmp_path / "run", "--batch-size", 8, "--steps", 1, "--workers", 0, "--lr", "1e-5")[0] == 0
    code, _, err = run_main(capsys, "export", tmp_path / "run", tmp_path / "x", "--license", "MIT License: see repo")
    assert code == 2 and "not one of the Hub's license identifiers" in err and not (tmp_path / "x").exists()
    code, _, err = run_main(capsys, "export", tmp_path / "run", tmp_path / "x", "--license", "mit", "--license-name", "mine")
    assert code == 2 and "go with --license other" in err
    # a run folder exports its newest checkpoint (checkpoints/latest)
    for license, name, link in (("other", None, None), ("other", "acme: research-only #2", "LICENSE.md"), ("cc-by-nc-4.0", None, None)):
        out = tmp_path / f"card-{license}-{name is None}"
        extra = [*(["--license-name", name] if name else []), *(["--license-link", link] if link else [])]
        assert run_main(capsys, "export", tmp_path / "run", out, "--license", license, *extra)[0] == 0
        card = ModelCard.load(out / "README.md")
        assert card.data.license == license and card.data.tags == ["compclip", "clip", "vision-language", "compositionality"]
        if license == "other":  # the Hub asks a license_name of `other`
            assert (card.data.license_name, card.data.license_link) == (name or "same-as-base-model", link)
        assert "| learning rate | 1e-05 |" in card.text and "| training data | train.csv |" in card.text and str(odd) not in card.text
    # --push-to-hub: offline here, so huggingface_hub's own call fails, in one line; the export stays
    code, _, err = run_main(capsys, "export", tmp_path / "run", tmp_path / "pushed", "--push-to-hub", "someone/tiny-clip")
    said = err.splitlines()[-1]  # (after the log's line naming the run's newest checkpoint)
    assert code == 2 and said.startswith("error: --push-to-hub someone/tiny-clip: OfflineModeIsEnabled") and "hf upload" in said
    assert (tmp_path / "pushed" / "README.md").is_file()
    config = json.loads((tmp_path / "run" / "checkpoints" / "step_0000001" / "config.json").read_text())
    assert upload_arguments(tmp_path / "pushed", "someone/tiny-clip", config) == {
        "repo_id": "someone/tiny-clip", "folder_path": str(tmp_path / "pushed"), "repo_type": "model",
        "commit_message": "compclip export of compclip-tiny-clip (clip) step 1"}


# ---- the QuickGELU guard -----------------------------------------------------------------------------------------------


def _scripted(tmp_path, quick_gelu: bool):
    """A TorchScript archive of a small CLIP, as OpenAI ships theirs (`torch.jit.save` of the scripted model)."""
    import warnings

    model = open_clip.create_model("compclip-tiny-clip", force_quick_gelu=quick_gelu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.script(model.eval())
    file = tmp_path / f"tiny-{'quickgelu' if quick_gelu else 'gelu'}.pt"
    scripted.save(str(file))
    return scripted, file


def test_an_openai_format_torchscript_archive_is_refused_under_a_gelu_config_and_loads_under_quickgelu(tmp_path):
    scripted, file = _scripted(tmp_path, quick_gelu=True)
    with pytest.raises(UsageError, match=r"OpenAI-format TorchScript archive .* runs GELU: load it with force_quick_gelu=True"):
        load_model("compclip-tiny-clip", pretrained=str(file))
    model, _, tokenizer = load_model("compclip-tiny-clip", pretrained=str(file), force_quick_gelu=True)
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for a, b in zip(model(images, tokenizer(CAPTIONS))[:2], scripted(images, tokenizer(CAPTIONS))[:2], strict=True):
            assert torch.allclose(a, b, atol=1e-6)
    # and the reverse: GELU weights under a QuickGELU config
    _, gelu = _scripted(tmp_path, quick_gelu=False)
    with pytest.raises(UsageError, match="runs GELU, but compclip-tiny-clip runs QuickGELU"):
        load_model("compclip-tiny-clip", pretrained=str(gelu), force_quick_gelu=True)


def test_the_guard_names_the_right_config_and_reads_what_files_say(tmp_path):
    with pytest.raises(UsageError, match=r"pretrained='openai' of ViT-B-32 was trained with QuickGELU.*load it as ViT-B-32-quickgelu"):
        load_model("ViT-B-32", "openai")  # refused before any download
    model, _, _ = load_model("compclip-tiny-clip")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    openai = tmp_path / "openai-state.pt"  # OpenAI's state dict as its loader returns it: the extras say where it comes from
    extras = {"input_resolution": torch.tensor(64), "context_length": torch.tensor(77), "vocab_size": torch.tensor(49408)}
    torch.save({**state, **extras}, openai)
    with pytest.raises(UsageError, match="an OpenAI-format state dict"):
        load_model("compclip-tiny-clip", pretrained=str(openai))
    named = tmp_path / "named.safetensors"  # compclip's export names the config it was written from
    save_file(state, named, metadata={"format": "pt", "open_clip_model": "compclip-tiny-clip"})
    with pytest.raises(UsageError, match=r"written from compclip-tiny-clip .* runs QuickGELU: load it under a config without quick_gelu"):
        load_model("compclip-tiny-clip", pretrained=str(named), force_quick_gelu=True)
    plain = tmp_path / "plain.safetensors"  # a plain state dict says nothing: loaded as asked
    save_file(state, plain)
    load_model("compclip-tiny-clip", pretrained=str(plain), force_quick_gelu=True)


@pytest.mark.parametrize("tower", ["vision_model", "text_model"])
def test_the_agreement_guard_refuses_when_one_tower_alone_disagrees(tmp_path, monkeypatch, tower):
    """A conversion whose image tower (or text tower) alone drifts is refused, naming that tower's difference, and the
    other's is ~0: the guard takes the larger of the two, not one of them. The drift is a real weight of the converted
    model nudged after the conversion, as a mapping bug would leave it."""
    model, _, _ = load_model("compclip-tiny-clip")
    convert = to_hf.convert

    def drifting(*args, **kwargs):
        hf, kind = convert(*args, **kwargs)
        norm = getattr(hf, tower).post_layernorm if tower == "vision_model" else hf.text_model.final_layer_norm
        with torch.no_grad():  # not a uniform scale, which the normalised embedding would not show
            norm.weight.add_(torch.randn(norm.weight.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
        return hf, kind

    monkeypatch.setattr(to_hf, "convert", drifting)
    ckpt = save_checkpoint(model, tmp_path / "ckpt")
    with pytest.raises(to_hf.UnmappableError, match="embeddings differ from open_clip's") as caught:
        export(ckpt, tmp_path / "hf", "hf")
    image, text = (float(v) for v in __import__("re").findall(r"(?:image|text) ([0-9.e+-]+)", str(caught.value)))
    moved, still = (image, text) if tower == "vision_model" else (text, image)
    assert moved > to_hf.AGREEMENT_TOLERANCE > 10 * still
    assert not (tmp_path / "hf").exists()


def test_the_card_shows_the_newest_result_of_a_benchmark_for_these_weights(tmp_path):
    """Two results of one benchmark for the exported weights: the card's table shows the newer file, wherever it sorts;
    a result of other weights, however new, is not shown."""
    from compclip.export.card import find_results

    def result(folder, acc, sha, age):
        path = tmp_path / folder / "sugarcrepe.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"dataset": "sugarcrepe", "weights_sha256": sha, "metrics": {"overall": acc}}))
        os.utime(path, (1_700_000_000 - age, 1_700_000_000 - age))

    result("a_rerun", 0.71, "ours", age=0)  # newest, and first by name
    result("b_first_try", 0.65, "ours", age=3600)
    result("c_other_model", 0.99, "theirs", age=-60)
    found = find_results("ours", [tmp_path])
    assert [r["metrics"]["overall"] for r in found] == [0.71]
    os.utime(tmp_path / "b_first_try" / "sugarcrepe.json", (1_700_000_100, 1_700_000_100))
    assert [r["metrics"]["overall"] for r in find_results("ours", [tmp_path])] == [0.65]


def test_the_card_finds_results_where_the_readme_writes_them(tmp_path, capsys, monkeypatch):
    """The README evaluates into `results/NAME` beside the runs (`compclip eval ... --out results/c2lip`): an export
    from that working folder finds those results of its weights without `--results`, and none of other weights."""
    from compclip.models import load_model
    from compclip.models.checkpoint import weights_sha256

    data = make_dataset(tmp_path, n=16)
    assert run_main(capsys, "train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data", data, "--out",
                    tmp_path / "runs" / "c2lip", "--batch-size", 8, "--steps", 1, "--workers", 0, "--lr", "1e-5")[0] == 0
    ours = weights_sha256(load_model(str(tmp_path / "runs" / "c2lip"))[0])
    for folder, sha, acc in (("c2lip", ours, 0.625), ("someone-else", "0" * 64, 0.99)):
        (tmp_path / "results" / folder).mkdir(parents=True)
        (tmp_path / "results" / folder / "sugarcrepe.json").write_text(json.dumps(
            {"dataset": "sugarcrepe", "weights_sha256": sha, "metrics": {"overall": acc}, "ties": "strict", "precision": "fp32"}))
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "export", "runs/c2lip", "exported", "--license", "mit")[0] == 0
    card = (tmp_path / "exported" / "README.md").read_text()
    assert "| sugarcrepe | overall | 0.6250 |" in card and "0.99" not in card and "No `compclip eval` result" not in card
