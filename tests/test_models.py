"""Model factory, checkpoints and export, on the bundled tiny configs and a real architecture."""
import json
import pickle

import open_clip
import pytest
import torch
from safetensors.torch import load_file, save_file

import compclip
from compclip.errors import DataError, DownloadError, UsageError
from compclip.models import (
    BUNDLED_MODELS,
    CheckpointMismatchError,
    bundled,
    load_model,
    save_checkpoint,
)
from compclip.models import checkpoint as checkpoint_mod

CAPTIONS = ["a red couch next to a white table", "a white couch next to a red table", "two dogs"]


def encode(model, tokenizer, images):
    with torch.no_grad():
        return model.encode_image(images), model.encode_text(tokenizer(CAPTIONS))


def assert_same_outputs(a, b, tok_a, tok_b, size=64):
    images = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(1))
    for x, y in zip(encode(a, tok_a, images), encode(b, tok_b, images), strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_bundled_config_builds_and_encodes_offline(name):
    model, preprocess, tokenizer = load_model(name)
    assert not model.training
    from PIL import Image

    image = preprocess(Image.new("RGB", (100, 80), (200, 30, 30))).unsqueeze(0)
    assert image.shape == (1, 3, 64, 64)
    tokens = tokenizer(CAPTIONS)
    assert tokens.shape == (3, tokenizer.context_length) == (3, model.context_length)
    with torch.no_grad():
        img, txt, _scale = model(image, tokens)[:3]
    assert img.shape == (1, 64) and txt.shape == (3, 64)
    assert torch.allclose(img.norm(dim=-1), torch.ones(1)) and torch.allclose(txt.norm(dim=-1), torch.ones(3))
    if name in bundled.HF_TOKENIZED:  # the WordPiece tokenizer: the cleaned words, then </s> (id 2) as SigLIP's T5 ends a text
        words = [bundled.WORDPIECE_VOCAB.index(w) for w in CAPTIONS[0].split()]
        assert tokens[0, : len(words) + 1].tolist() == [*words, 2]
    else:  # the CLIP BPE encodes the caption's words (id 49406 starts, 49407 ends every text)
        assert tokens[0, 0] == 49406 and 49407 in tokens[0].tolist()


def test_tiny_siglip_has_the_siglip_head_and_bias():
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    from timm.layers import AttentionPoolLatent

    assert isinstance(model.visual.trunk.attn_pool, AttentionPoolLatent)
    assert model.visual.trunk.cls_token is None
    assert model.logit_bias.item() == -10 and model.logit_scale.exp().item() == pytest.approx(10.0)
    assert tokenizer.context_length == 64


def test_tiny_clip_has_a_class_token_and_no_bias():
    model, _, tokenizer = load_model("compclip-tiny-clip")
    assert model.visual.class_embedding.shape == (64,)
    assert model.logit_bias is None and tokenizer.context_length == 77


def test_real_siglip_builds_offline_and_its_hub_tokenizer_fails_clearly():
    model, _, tokenizer = load_model("ViT-B-16-SigLIP")
    assert model.visual.trunk.attn_pool.kv.in_features == 768
    with torch.no_grad():
        assert model.encode_image(torch.randn(1, 3, 224, 224)).shape == (1, 768)
    with pytest.raises(DownloadError, match="Hugging Face hub") as failed:
        tokenizer(["a dog"])
    said = str(failed.value)  # transformers' reason, one line, then compclip's: no stray marks where the two meet
    assert said.startswith("the tokenizer of ViT-B-16-SigLIP could not be loaded (") and "\n" not in said
    assert ".)" not in said and "'.)" not in said and "). SigLIP-family tokenizers come from the Hugging Face hub" in said


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_checkpoint_roundtrip_is_bit_identical(tmp_path, name):
    model, _, tokenizer = load_model(name)
    with torch.no_grad():  # move away from init so a silent re-init would show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    folder = save_checkpoint(model, tmp_path / "ckpt", method="siglip", train_args={"lr": 1e-5}, step=3)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "open_clip_config.json"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_name"] == name and config["method"] == "siglip" and config["step"] == 3
    assert config["train_args"] == {"lr": 1e-5} and config["compclip_version"] == compclip.__version__
    assert config["model_cfg"] == open_clip.get_model_config(name)
    source = name if name in bundled.HF_TOKENIZED else "clip_bpe"
    assert config["tokenizer"] == {"source": source, "context_length": tokenizer.context_length}
    reloaded, _, tok2 = load_model(str(folder))
    assert_same_outputs(model, reloaded, tokenizer, tok2)
    # open_clip's own local-dir loader reads the same folder
    plain = open_clip.create_model(f"local-dir:{folder}").eval()
    assert_same_outputs(model, plain, tokenizer, tokenizer)


def test_forced_quick_gelu_and_context_length_survive_a_roundtrip(tmp_path):
    model, _, tokenizer = load_model("compclip-tiny-clip", force_quick_gelu=True, force_context_length=32)
    assert tokenizer(["a dog"]).shape == (1, 32)
    folder = save_checkpoint(model, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_cfg"]["quick_gelu"] is True and config["model_cfg"]["text_cfg"]["context_length"] == 32
    reloaded, _, tok2 = load_model(str(folder))
    assert isinstance(reloaded.transformer.resblocks[0].mlp.gelu, open_clip.transformer.QuickGELU)
    assert tok2(["a dog"]).shape == (1, 32)
    assert_same_outputs(model, reloaded, tokenizer, tok2)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt", ".bin"])
def test_pretrained_weights_files_load(tmp_path, suffix):
    source, _, tokenizer = load_model("compclip-tiny-clip")
    with torch.no_grad():
        for p in source.parameters():
            p.mul_(1.5)
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    file = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        save_file(state, file)
    else:  # open_clip training checkpoints wrap the DDP state dict
        torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in state.items()}}, file)
    loaded, _, _ = load_model("compclip-tiny-clip", pretrained=str(file))
    assert_same_outputs(source, loaded, tokenizer, tokenizer)
    assert loaded.compclip_spec["pretrained"] == str(file)


class Payload:
    def __reduce__(self):
        return (print, ("pickled code ran",))


def test_pickled_code_is_refused(tmp_path, capsys):
    file = tmp_path / "evil.pt"
    with open(file, "wb") as f:
        pickle.dump({"state_dict": Payload()}, f)
    with pytest.raises(DataError, match=r"evil\.pt: refused"):
        load_model("compclip-tiny-clip", pretrained=str(file))
    assert "pickled code ran" not in capsys.readouterr().out


def test_other_architecture_fails_with_missing_and_unexpected_keys(tmp_path):
    clip_model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(clip_model, tmp_path / "clip")
    with pytest.raises(CheckpointMismatchError) as err:
        load_model("compclip-tiny-siglip", pretrained=str(folder / "model.safetensors"))
    e = err.value
    assert "visual.trunk.attn_pool.kv.weight" in e.missing and "logit_bias" in e.missing
    assert "visual.class_embedding" in e.unexpected and "visual.conv1.weight" in e.unexpected
    message = str(e)
    assert str(folder / "model.safetensors") in message
    assert f"{len(e.missing)} missing keys" in message and f"{len(e.unexpected)} unexpected keys" in message


def test_shape_mismatch_is_listed(tmp_path):
    model, _, _ = load_model("compclip-tiny-clip")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state["text_projection"] = torch.zeros(64, 32)
    save_file(state, tmp_path / "w.safetensors")
    with pytest.raises(CheckpointMismatchError) as err:
        load_model("compclip-tiny-clip", pretrained=str(tmp_path / "w.safetensors"))
    assert err.value.mismatched == [("text_projection", (64, 32), (64, 64))]
    assert not err.value.missing and not err.value.unexpected


def test_hf_hub_id_loads_from_a_local_hub_cache(hub_cache):
    """A real `hf-hub:` load, served by huggingface_hub from its cache (offline)."""
    from conftest import plant_hub_repo

    source, _, tokenizer = load_model("compclip-tiny-clip")
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    plant_hub_repo(hub_cache, "someone/tiny-clip", {
        "open_clip_config.json": json.dumps({"model_cfg": open_clip.get_model_config("compclip-tiny-clip")}).encode(),
        "weights": lambda snapshot: save_file(state, snapshot / "open_clip_model.safetensors")})
    model, _, tok = load_model("hf-hub:someone/tiny-clip")
    assert_same_outputs(source, model, tokenizer, tok)
    assert model.compclip_spec["model_name"] == "hf-hub:someone/tiny-clip"


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(model, tmp_path / "ckpt", step=1)
    before = load_file(folder / "model.safetensors")

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_mod, "save_file", broken_save)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(model, folder, step=2)
    assert json.loads((folder / "config.json").read_text())["step"] == 1
    after = load_file(folder / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary leftovers


def test_saving_over_a_checkpoint_replaces_it(tmp_path):
    model, _, tokenizer = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt", step=1)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    save_checkpoint(model, tmp_path / "ckpt", step=2)
    reloaded, _, _ = load_model(str(tmp_path / "ckpt"))
    assert reloaded.compclip_spec["model_name"] == "compclip-tiny-clip"
    assert_same_outputs(model, reloaded, tokenizer, tokenizer)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_bad_names_and_tags_are_clear_errors(tmp_path):
    with pytest.raises(UsageError, match="did you mean compclip-tiny-clip"):
        load_model("compclip-tiny-clp")
    with pytest.raises(UsageError, match="neither a file nor a tag"):
        load_model("compclip-tiny-clip", pretrained="no-such-tag")
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(load_model("compclip-tiny-clip")[0], tmp_path / "x", model_name="other")
    (tmp_path / "w.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match=r"w\.pt"):
        load_model("compclip-tiny-clip", pretrained=str(tmp_path / "w.pt"))
    with pytest.raises(UsageError, match="is a weights file"):
        load_model(str(tmp_path / "w.pt"))
    with pytest.raises(ValueError, match="no compclip spec"):
        save_checkpoint(open_clip.create_model("compclip-tiny-clip"), tmp_path / "y")


def test_the_tokenizer_cache_returns_what_the_bpe_returns():
    """Repeated, new, empty and over-capacity calls against open_clip's own tokenizer; the rows are shared by every
    tokenizer of the same source and length (a model loaded again, another model of that tokenizer), not by another
    length; a pickled copy (a spawned DataLoader worker's) starts empty; another context length bypasses the cache."""
    _, _, tokenizer = load_model("compclip-tiny-siglip")
    tokenizer._rows.clear()  # the process's memory of earlier tests
    reference = open_clip.SimpleTokenizer(context_length=64)
    calls = [CAPTIONS, [*CAPTIONS[::-1], "three cats"], [CAPTIONS[2]] * 4, "one string", []]
    for texts in calls:
        assert torch.equal(tokenizer(texts), reference(texts)), texts
    assert len(tokenizer._rows) == 5 and len(pickle.loads(pickle.dumps(tokenizer))._rows) == 0
    assert load_model("compclip-tiny-siglip-conv")[2]._rows is tokenizer._rows  # both CLIP BPE at 64
    assert load_model("compclip-tiny-world")[2]._rows is not tokenizer._rows  # CLIP BPE at 40
    assert torch.equal(tokenizer(CAPTIONS, context_length=16), reference(CAPTIONS, context_length=16))
    tokenizer.cache_size = 2
    many = [f"caption {i}" for i in range(5)]
    assert torch.equal(tokenizer(many), reference(many)) and len(tokenizer._rows) == 2
    assert torch.equal(tokenizer([*many[-2:], CAPTIONS[0]]), reference([*many[-2:], CAPTIONS[0]]))


def test_a_load_whose_weights_overwrite_every_parameter_draws_no_random_ones(tmp_path, monkeypatch, hub_cache):
    """A checkpoint folder, a weights file or an `hf-hub:` repository is loaded strictly: the model it goes into is built
    without torch.nn.init's random fills (seconds of a ViT-B's load), to the same weights, and torch.nn.init is as it was
    afterwards. A model without weights is still drawn from its seed."""
    from conftest import plant_hub_repo

    drawn = []
    for name in ("normal_", "kaiming_uniform_"):
        fill = getattr(torch.nn.init, name)
        monkeypatch.setattr(torch.nn.init, name,
                            lambda tensor, *a, _fill=fill, _name=name, **k: drawn.append(_name) or _fill(tensor, *a, **k))
    spies = (torch.nn.init.normal_, torch.nn.init.kaiming_uniform_)
    model, _, _ = load_model("compclip-tiny-clip", init_seed=3)
    assert drawn, "a model without weights draws them"
    save_checkpoint(model, tmp_path / "ckpt")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "weights.safetensors")
    plant_hub_repo(hub_cache, "someone/tiny-clip", {
        "open_clip_config.json": json.dumps({"model_cfg": open_clip.get_model_config("compclip-tiny-clip")}).encode(),
        "open_clip_model.safetensors": (tmp_path / "weights.safetensors").read_bytes()})
    drawn.clear()
    loaded = [load_model(str(tmp_path / "ckpt"))[0], load_model("compclip-tiny-clip", str(tmp_path / "weights.safetensors"))[0],
              load_model("hf-hub:someone/tiny-clip")[0]]
    assert drawn == [] and (torch.nn.init.normal_, torch.nn.init.kaiming_uniform_) == spies
    for other in loaded:
        assert other.state_dict().keys() == model.state_dict().keys()
        assert all(torch.equal(other.state_dict()[k], v) for k, v in model.state_dict().items())
