"""Models transformers loads (CLIPModel, SiglipModel, BlipForImageTextRetrieval, FlavaModel), scored by compclip
through `--model FOLDER` and `hf:ORG/NAME`: tiny random models built from transformers' config classes, each score
checked against the model's own forward on the same inputs, and an open_clip export scoring as its checkpoint does."""
import json

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import opened, plant_hub_repo, run_main

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "dog", "cat", "red", "blue", "on", "the", "mat", "is", "of",
         "photo", "green", "under", "big", "small"]
RECORDS = {str(k): {"filename": f"{k:012d}.jpg", "caption": caption, "negative_caption": negative} for k, (caption, negative) in
           enumerate([("a red dog on the mat", "a blue dog on the mat"), ("the cat is small", "the cat is big"),
                      ("a photo of a green cat", "a photo of a red cat"), ("a dog under the mat", "a mat under the dog"),
                      ("a big blue cat", "a big green cat")])}
KINDS = ("clip", "siglip", "siglip2", "flava", "blip")


def tiny_model(kind: str, folder, seed: int = 0):
    """A random `kind` model at the smallest sizes, saved with its processor (a WordPiece tokenizer of `WORDS`) to `folder`."""
    import transformers as t

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tokenizer = t.BertTokenizer(str(folder / "vocab.txt"))
    (folder / "vocab.txt").unlink()
    layer = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    vision, text = {**layer, "image_size": 32, "patch_size": 16}, {**layer, "vocab_size": len(WORDS), "max_position_embeddings": 16}
    square = {"height": 32, "width": 32}
    torch.manual_seed(seed)
    if kind == "clip":
        model = t.CLIPModel(t.CLIPConfig(text_config={**text, "eos_token_id": 3, "bos_token_id": 2, "pad_token_id": 0},
                                         vision_config=vision, projection_dim=8))
        processor = t.CLIPProcessor(image_processor=t.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=square), tokenizer=tokenizer)
    elif kind == "siglip":
        tokenizer.model_input_names = ["input_ids"]  # as SigLIP's own tokenizer: its texts are read whole, padding included
        model = t.SiglipModel(t.SiglipConfig(text_config=text, vision_config=vision))
        processor = t.SiglipProcessor(image_processor=t.SiglipImageProcessor(size=square), tokenizer=tokenizer)
    elif kind == "siglip2":  # images at their own aspect ratio, in at most 4 patches of 16 px
        model = t.Siglip2Model(t.Siglip2Config(text_config=text, vision_config={**layer, "num_patches": 4, "patch_size": 16}))
        processor = t.Siglip2Processor(image_processor=t.Siglip2ImageProcessor(max_num_patches=4, patch_size=16), tokenizer=tokenizer)
    elif kind == "flava":
        model = t.FlavaModel(t.FlavaConfig(image_config=vision, text_config=text, multimodal_config=layer, projection_dim=8,
                                           hidden_size=16))
        processor = t.FlavaProcessor(image_processor=t.FlavaImageProcessor(size=square, crop_size=square), tokenizer=tokenizer)
    else:
        model = t.BlipForImageTextRetrieval(t.BlipConfig(text_config={**text, "encoder_hidden_size": 16}, vision_config=vision,
                                                         projection_dim=8, image_text_hidden_size=8))
        processor = t.BlipProcessor(image_processor=t.BlipImageProcessor(size=square), tokenizer=tokenizer)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{kind: its model folder}, and a SugarCrepe-layout data root of five records over generated images."""
    root = tmp_path_factory.mktemp("transformers")
    (root / "data" / "sugarcrepe").mkdir(parents=True)
    (root / "data" / "sugarcrepe" / "swap_att.json").write_text(json.dumps(RECORDS))
    (root / "data" / "coco" / "val2017").mkdir(parents=True)
    rng = torch.Generator().manual_seed(0)
    for record in RECORDS.values():
        pixels = torch.randint(0, 256, (24, 40, 3), generator=rng, dtype=torch.uint8).numpy()
        Image.fromarray(pixels).save(root / "data" / "coco" / "val2017" / record["filename"])
    return {kind: tiny_model(kind, root / kind) for kind in KINDS}, root / "data"


def reference(kind: str, folder, images: list, texts: list[str], score: str = "") -> torch.Tensor:
    """Each (images[k], texts[k])'s score by the model's own forward over the processor's inputs."""
    import transformers as t
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    pixels = [Image.open(i).convert("RGB") for i in images]
    padding = "max_length" if kind in ("siglip", "siglip2") else True
    inputs = processor(text=texts, images=pixels, return_tensors="pt", padding=padding, max_length=16, truncation=True)
    with torch.no_grad():
        if kind == "blip":
            model = t.BlipForImageTextRetrieval.from_pretrained(folder).eval()
            args = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"], "pixel_values": inputs["pixel_values"]}
            itc = model(**args, use_itm_head=False).itm_score.diagonal()
            itm = model(**args, use_itm_head=True).itm_score
            return {"itc": itc, "itm": itm.softmax(-1)[:, 1], "itm+itc": itm[:, 1] + itc}[score]
        if kind == "flava":  # the forward's unimodal outputs, projected at the CLS token as FLAVA's contrastive head does
            model = t.FlavaModel.from_pretrained(folder).eval()
            out = model(**inputs, skip_multimodal_encoder=True)
            image = F.normalize(model.image_projection(out.image_embeddings[:, 0]), dim=-1)
            text = F.normalize(model.text_projection(out.text_embeddings[:, 0]), dim=-1)
            return (image * text).sum(-1)
        model = {"clip": t.CLIPModel, "siglip": t.SiglipModel, "siglip2": t.Siglip2Model}[kind].from_pretrained(folder).eval()
        out = model(**{k: v for k, v in inputs.items() if k != "token_type_ids"})
        scale = model.logit_scale.exp()
        bias = model.logit_bias if kind != "clip" else 0
        return ((out.logits_per_image - bias) / scale).diagonal()  # the logits' order: their dot product


CASES = [("clip", None), ("siglip", None), ("siglip2", None), ("flava", None), ("blip", "itm+itc"), ("blip", "itm"), ("blip", "itc")]


@pytest.mark.parametrize(("kind", "score"), CASES)
def test_each_class_scores_a_pair_as_its_own_forward(made, kind, score):
    from compclip.eval.scorer import load_scorer

    folders, data = made
    images = [data / "coco" / "val2017" / r["filename"] for r in RECORDS.values()]
    texts = [r["caption"] for r in RECORDS.values()]
    workers = 1 if kind == "siglip2" else 0  # SigLIP 2's pixels, mask and grid sizes: a dict through a DataLoader worker
    scorer = load_scorer(str(folders[kind]), workers=workers, batch_size=2, blip_score=score)
    ours = scorer.pairs(images, texts)
    theirs = reference(kind, folders[kind], images, texts, score or "")
    assert ours.shape == (5,) and torch.allclose(ours, theirs, atol=1e-5), (ours, theirs)
    matrix = scorer.matrix(images[:2], texts[:3])  # every image against every text: the same scores, pair by pair
    assert torch.allclose(matrix, reference(kind, folders[kind], [i for i in images[:2] for _ in range(3)], texts[:3] * 2,
                                            score or "").view(2, 3), atol=1e-5)


def test_flavas_release_names_its_pretraining_class_and_scores_as_the_flava_model_inside_it(made, tmp_path):
    """facebook/flava-full's config.json names `FlavaForPreTraining` (before, refused as a class compclip does not score):
    its `flava`, the FlavaModel FLAVA's contrastive head scores with, is what compclip loads and scores."""
    import transformers as t
    from transformers import AutoProcessor

    from compclip.eval.scorer import load_scorer

    folders, data = made
    layer = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    vision, text = {**layer, "image_size": 32, "patch_size": 16}, {**layer, "vocab_size": len(WORDS), "max_position_embeddings": 16}
    torch.manual_seed(1)
    pre = t.FlavaForPreTraining(t.FlavaConfig(image_config=vision, text_config=text, multimodal_config=layer, projection_dim=8,
                                              hidden_size=16, init_codebook=False)).eval()
    pre.save_pretrained(tmp_path / "flava-full")
    AutoProcessor.from_pretrained(folders["flava"]).save_pretrained(tmp_path / "flava-full")
    assert json.loads((tmp_path / "flava-full" / "config.json").read_text())["architectures"] == ["FlavaForPreTraining"]
    images = [data / "coco" / "val2017" / r["filename"] for r in RECORDS.values()]
    texts = [r["caption"] for r in RECORDS.values()]
    ours = load_scorer(str(tmp_path / "flava-full"), workers=0, batch_size=2).pairs(images, texts)
    inputs = AutoProcessor.from_pretrained(tmp_path / "flava-full")(text=texts, images=[Image.open(i).convert("RGB") for i in images],
                                                                      return_tensors="pt", padding=True, max_length=16, truncation=True)
    with torch.no_grad():  # the pretraining model's own FlavaModel, projected at the CLS token
        out = pre.flava(**inputs, skip_multimodal_encoder=True)
        theirs = (F.normalize(pre.flava.image_projection(out.image_embeddings[:, 0]), dim=-1)
                  * F.normalize(pre.flava.text_projection(out.text_embeddings[:, 0]), dim=-1)).sum(-1)
    assert torch.allclose(ours, theirs, atol=1e-5), (ours, theirs)


@pytest.mark.parametrize("kind", KINDS)
def test_eval_of_a_transformers_folder_scores_each_item_as_the_forward(made, kind, tmp_path, capsys):
    import pandas as pd

    folders, data = made
    code, _, err = run_main(capsys, "eval", "--model", folders[kind], "--benchmark", "sugarcrepe/swap_att", "--data-root", data,
                            "--out", tmp_path / "out", "--workers", "0", "--device", "cpu")
    assert code == 0, err
    items = pd.read_parquet(tmp_path / "out" / "sugarcrepe-swap_att.items.parquet").sort_values("item")
    records = [RECORDS[str(i)] for i in items["item"]]
    images = [data / "coco" / "val2017" / r["filename"] for r in records]
    true = reference(kind, folders[kind], images, [r["caption"] for r in records], "itm+itc")
    false = reference(kind, folders[kind], images, [r["negative_caption"] for r in records], "itm+itc")
    assert torch.allclose(torch.tensor(items["score_true"].tolist()), true, atol=1e-5)
    assert torch.allclose(torch.tensor(items["score_false"].tolist()), false, atol=1e-5)
    record = json.loads((tmp_path / "out" / "sugarcrepe-swap_att.json").read_text())
    assert record["metrics"]["swap_att"]["acc"] == pytest.approx(float((true > false).float().mean()))


def test_a_sweep_of_transformers_models_decodes_each_image_once_per_processor(made, tmp_path, capsys):
    """SigLIP 2 (its pixels a dict of patches, mask and grid), BLIP (itm+itc: its image tokens and embeddings from one
    decode), then SigLIP 2 with other weights, no memory for the decoded images: each image opened once for the two
    SigLIP 2 models (the second reading the first's from the scratch files) and once for BLIP; each scored as alone."""
    import pandas as pd

    from compclip.eval.config import EvalConfig
    from compclip.eval.sweep import folder_name, sweep

    folders, data = made
    models = (str(folders["siglip2"]), str(folders["blip"]), str(tiny_model("siglip2", tmp_path / "siglip2-seed1", seed=1)))
    with opened() as files:
        sweep(EvalConfig(model=",".join(models), benchmark="sugarcrepe/swap_att", data_root=str(data), workers=0, batch_size=2,
                         device="cpu", out=str(tmp_path / "sweep")), memory_bytes=0)
    images = sorted((data / "coco" / "val2017").iterdir())
    assert [sum(f == str(image) for f in files) for image in images] == [2] * len(RECORDS)
    for model in models[1:]:
        code, _, err = run_main(capsys, "-q", "eval", "--model", model, "--benchmark", "sugarcrepe/swap_att", "--data-root", data,
                                "--out", tmp_path / "alone" / folder_name(model), "--workers", "0", "--batch-size", "2",
                                "--device", "cpu")
        assert code == 0, err
        swept, alone = (pd.read_parquet(tmp_path / where / folder_name(model) / "sugarcrepe-swap_att.items.parquet")
                        for where in ("sweep", "alone"))
        assert swept.equals(alone)


def test_an_open_clip_model_exported_for_transformers_scores_as_its_checkpoint(made, tmp_path, capsys):
    """`compclip export --format hf` of a checkpoint, evaluated through `--model FOLDER`: transformers' CLIPModel, its
    processor and tokenizer, give the checkpoint's own accuracy and, item by item, its scores."""
    import pandas as pd

    from compclip.models import load_model, save_checkpoint

    _, data = made
    model, _, _ = load_model("compclip-tiny-clip", init_seed=3)
    ckpt = save_checkpoint(model, tmp_path / "ckpt")
    code, _, err = run_main(capsys, "export", ckpt, tmp_path / "hf", "--format", "hf")
    assert code == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["CLIPModel"]
    results = {}
    for name, folder in (("ckpt", ckpt), ("hf", tmp_path / "hf")):
        code, _, err = run_main(capsys, "eval", "--model", folder, "--benchmark", "sugarcrepe/swap_att", "--data-root", data,
                                "--out", tmp_path / name, "--workers", "0", "--device", "cpu")
        assert code == 0, err
        record = json.loads((tmp_path / name / "sugarcrepe-swap_att.json").read_text())
        results[name] = record["metrics"]["swap_att"]["acc"], pd.read_parquet(tmp_path / name / "sugarcrepe-swap_att.items.parquet")
    assert results["hf"][0] == results["ckpt"][0]
    for column in ("score_true", "score_false"):
        assert torch.allclose(torch.tensor(results["hf"][1][column].tolist()), torch.tensor(results["ckpt"][1][column].tolist()),
                              atol=1e-4)


def test_a_hub_repository_in_the_cache_scores_as_its_folder_offline(made, hub_cache):
    from compclip.eval.scorer import load_scorer

    folders, data = made
    files = {f.name: f.read_bytes() for f in folders["siglip"].iterdir()}
    plant_hub_repo(hub_cache, "someone/tiny-siglip", files, absent=())
    images = [data / "coco" / "val2017" / r["filename"] for r in RECORDS.values()]
    texts = [r["negative_caption"] for r in RECORDS.values()]
    hub = load_scorer("hf:someone/tiny-siglip", workers=0).pairs(images, texts)
    assert torch.allclose(hub, reference("siglip", folders["siglip"], images, texts), atol=1e-5)


@pytest.mark.parametrize(("edit", "said"), [
    ({"architectures": ["BlipForConditionalGeneration"]}, "architectures ['BlipForConditionalGeneration']) is not one compclip "
                                                          "scores; it scores CLIPModel (clip), SiglipModel (siglip), "
                                                          "Siglip2Model (siglip2), BlipForImageTextRetrieval (blip), "
                                                          "FlavaModel (flava)"),
    ({"architectures": None, "model_type": "owlvit"}, "model_type 'owlvit'"),
    ({"auto_map": {"AutoModel": "modeling_mine.MyCLIP"}}, "auto_map, transformers' trust_remote_code); compclip never runs code"),
])
def test_a_model_compclip_does_not_score_is_one_error_line_naming_it(made, tmp_path, capsys, edit, said):
    import shutil

    folders, data = made
    folder = tmp_path / "model"
    shutil.copytree(folders["blip"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **edit}))
    code, _, err = run_main(capsys, "eval", "--model", folder, "--benchmark", "sugarcrepe/swap_att", "--data-root", data,
                            "--out", tmp_path / "out", "--workers", "0")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0] and str(folder) in lines[0], err


def test_a_hub_repository_missing_offline_is_one_line_naming_the_cache(made, hub_cache, tmp_path, capsys):
    _, data = made
    code, _, err = run_main(capsys, "eval", "--model", "hf:someone/absent", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            data, "--out", tmp_path / "out", "--workers", "0")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "hf:someone/absent" in lines[0] and str(hub_cache) in lines[0], err


@pytest.mark.parametrize(("command", "said"), [
    (["export", "{clip}", "{tmp}/out"], "{clip}/config.json: a transformers model's config (model_type 'clip'), not a compclip "
                                        "checkpoint's: `compclip eval --model {clip}` scores it"),
    (["eval", "--model", "{clip}", "--blip-score", "itc", "--benchmark", "sugarcrepe/swap_att", "--data-root", "{data}", "--out",
      "{tmp}/out", "--workers", "0"], "--blip-score itc: {clip} is a CLIPModel"),
])
def test_what_applies_to_other_models_is_one_error_line(made, tmp_path, capsys, command, said):
    folders, data = made
    fill = {"clip": folders["clip"], "tmp": tmp_path, "data": data}
    code, _, err = run_main(capsys, *[part.format(**fill) for part in command])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and said.format(**fill) in lines[0], err


def _eval_one_line(capsys, folder, data, out) -> str:
    """`compclip eval --model FOLDER`'s one `error:` line (exit 2), the folder named in it."""
    code, _, err = run_main(capsys, "eval", "--model", folder, "--benchmark", "sugarcrepe/swap_att", "--data-root", data,
                            "--out", out, "--workers", "0")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and str(folder) in lines[0], err
    assert not (out / "sugarcrepe-swap_att.json").exists()
    return lines[0]


@pytest.mark.parametrize("removed", [("tokenizer.json",), ("tokenizer.json", "tokenizer_config.json")])
def test_a_folder_without_its_tokenizer_files_is_one_error_line_not_a_tie_on_every_item(made, tmp_path, capsys, removed):
    """Without them transformers makes a tokenizer of its special tokens alone: every word <unk>, every item a tie."""
    import shutil

    folders, data = made
    folder = tmp_path / "clip"
    shutil.copytree(folders["clip"], folder)
    for name in removed:
        (folder / name).unlink()
    line = _eval_one_line(capsys, folder, data, tmp_path / "out")
    assert f"{folder} holds none of its tokenizer's files (tokenizer.json, vocab.txt, vocab.json and merges.txt" in line, line


@pytest.mark.parametrize("config", ["processor_config.json", "tokenizer_config.json"])
def test_auto_map_in_a_processor_or_tokenizer_config_is_one_error_line_naming_the_file(made, tmp_path, capsys, config):
    """config.json clean, the processor's or the tokenizer's config asking for the folder's own Python: transformers
    stops on it with a traceback; compclip refuses it before loading, naming the file."""
    import shutil

    folders, data = made
    folder = tmp_path / "blip"
    shutil.copytree(folders["blip"], folder)
    held = json.loads((folder / config).read_text())
    (folder / config).write_text(json.dumps({**held, "auto_map": {"AutoProcessor": "processing_mine.MyProcessor"}}))
    line = _eval_one_line(capsys, folder, data, tmp_path / "out")
    assert f"{folder / config} maps a class to the repository's own Python (auto_map" in line, line


@pytest.mark.parametrize(("config_of", "weights_of", "named"), [("clip", "siglip", "SiglipModel"), ("siglip", "siglip2", "Siglip2Model"),
                                                                ("clip", "blip", "BlipForImageTextRetrieval")])
def test_a_config_of_one_class_with_weights_of_another_is_one_error_line(made, tmp_path, capsys, config_of, weights_of, named):
    """transformers would load what fits, draw the rest at random, or stop at the first other shape with a traceback."""
    import shutil

    folders, data = made
    folder = tmp_path / "mixed"
    shutil.copytree(folders[config_of], folder)
    shutil.copy(folders[weights_of] / "model.safetensors", folder / "model.safetensors")
    line = _eval_one_line(capsys, folder, data, tmp_path / "out")
    cls = json.loads((folder / "config.json").read_text())["architectures"][0]
    assert f"{folder / 'model.safetensors'} holds the weights of a {named}, but {folder / 'config.json'} names a {cls}" in line, line
