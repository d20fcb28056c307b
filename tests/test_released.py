"""The registry of released checkpoints (`compclip models`, `eval --model ID`): every row of the four papers' tables in
exactly one entry, each loadable entry naming what open_clip's own registry knows; a Hub file and a hand-downloaded file
(stand-ins of random weights at the real cache paths, offline) score exactly as the same file through `--model ARCH
--pretrained FILE`; a file that changed after its first load, one not there and an entry that cannot load are each one
`error:` line."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from compclip.eval.report import list_papers, paper_numbers
from compclip.models.released import get_released, hand_path, list_released
from conftest import image_bytes, plant_hub_repo, run_main

ENTRIES = [get_released(i) for i in list_released()]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def test_every_row_of_the_four_papers_is_in_exactly_one_entry_and_every_entry_row_is_a_papers():
    rows = {(paper, row["model"]) for paper in list_papers() for row in paper_numbers(paper)["rows"]}
    listed = [tuple(r) for e in ENTRIES for r in e.rows]
    assert sorted(set(listed)) == sorted(listed), "a row in two entries"
    assert set(listed) == rows


def test_each_loadable_entry_names_what_open_clip_or_transformers_loads():
    import open_clip

    models = open_clip.list_models()
    for e in ENTRIES:
        assert e.loads_as is None or e.unavailable is None, e.id
        if e.loads_as == "open_clip":
            assert e.model in models and e.pretrained in open_clip.list_pretrained_tags_by_model(e.model), e.id
            assert e.hf_hub == open_clip.get_pretrained_cfg(e.model, e.pretrained)["hf_hub"].strip("/"), e.id  # what `models` reads
        elif e.loads_as == "open_clip_file":
            assert e.model in models, e.id
            assert (e.hub_repo and e.hub_file) or (e.url and e.file and e.get), e.id
        elif e.loads_as == "open_clip_hub":
            assert re.fullmatch(r"hf-hub:[\w.-]+/[\w.-]+", e.model), e.id
        elif e.loads_as == "transformers":
            assert re.fullmatch(r"hf:[\w.-]+/[\w.-]+", e.model), e.id
        else:
            assert e.unavailable.endswith("."), e.id
        assert e.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", e.sha256), e.id
        assert e.source and e.verified and (e.licence or e.loads_as is None), e.id


def test_a_broken_entry_file_is_refused_naming_what_its_route_lacks():
    import dataclasses

    from compclip.models.released import _check

    negclip = get_released("negclip-b32")
    with pytest.raises(ValueError, match=r"negclip-b32\.json: lacks hub_repo and hub_file, or url, file and get"):
        _check(dataclasses.replace(negclip, get=None), "negclip-b32.json")
    with pytest.raises(ValueError, match=r"negclip-b32\.json: loadable and unavailable"):
        _check(dataclasses.replace(negclip, unavailable="gone."), "negclip-b32.json")
    with pytest.raises(ValueError, match=r"open_clip\.json: lacks pretrained"):
        _check(dataclasses.replace(get_released("openai-clip-b32"), id="open_clip", pretrained=None), "open_clip.json")
    with pytest.raises(ValueError, match=r"open_clip\.json: lacks hf_hub"):
        _check(dataclasses.replace(get_released("openai-clip-b32"), id="open_clip", hf_hub=None), "open_clip.json")
    with pytest.raises(ValueError, match=r"other\.json: .*or the file is not named by its id"):
        _check(negclip, "other.json")
    with pytest.raises(ValueError, match=r"dac-llm-b32\.json: lacks state_dict_key \(a LoRA checkpoint is converted from where"):
        _check(dataclasses.replace(get_released("dac-llm-b32"), state_dict_key=None), "dac-llm-b32.json")


def test_an_entry_is_found_by_its_name_whatever_the_case_and_a_typo_names_the_closest_ids():
    from compclip.errors import UsageError

    assert get_released("NEGCLIP (vit-B/32, Yuksekgonul et al.)").id == "negclip-b32"
    with pytest.raises(UsageError, match=r"no released checkpoint 'negclip-b23' \(did you mean negclip-b32"):
        get_released("negclip-b23")


@pytest.fixture
def swap_att(tmp_path):
    """SugarCrepe's swap_att split of four items, their images under their COCO names."""
    root = tmp_path / "bench"
    (root / "coco" / "val2017").mkdir(parents=True)
    (root / "sugarcrepe").mkdir()
    records = {}
    for i in range(4):
        name = f"{i + 1:012d}.jpg"
        (root / "coco" / "val2017" / name).write_bytes(image_bytes(i))
        records[str(i)] = {"filename": name, "caption": f"a red dog beside a blue cat {i}",
                           "negative_caption": f"a blue dog beside a red cat {i}"}
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    return root


def _state():
    import open_clip

    torch.manual_seed(1)
    return open_clip.create_model("ViT-B-32-quickgelu").state_dict()


def _scores(capsys, root, out, *model):
    code, _, err = run_main(capsys, "-q", "eval", *model, "--benchmark", "sugarcrepe/swap_att", "--data-root", root,
                            "--workers", "0", "--out", out)
    assert code == 0, err[-3000:]
    return pd.read_parquet(out / "sugarcrepe-swap_att.items.parquet")[["item", "score_true", "score_false"]]


def _ce_clip(hub_cache):
    """CE-CLIP's Hub file as the release serves it (a torch state dict), at huggingface_hub's cache path."""
    snapshot = plant_hub_repo(hub_cache, "le723z/CE_CLIP", {"CE_CLIP.pt": lambda s: torch.save(_state(), s / "CE_CLIP.pt")})
    return snapshot / "CE_CLIP.pt"


def _negclip(hub_cache):
    """NegCLIP's negclip.pth where compclip looks for it: an open_clip training checkpoint (the weights under
    "state_dict", beside the epoch and the run's name)."""
    path = hand_path(get_released("negclip-b32"))
    path.parent.mkdir(parents=True)
    torch.save({"epoch": 5, "name": "negclip", "state_dict": _state()}, path)
    return path


@pytest.mark.parametrize("name,plant", [("ce-clip-b32", _ce_clip), ("negclip-b32", _negclip)])
def test_a_released_id_scores_exactly_as_its_file_under_the_registered_architecture(name, plant, hub_cache, swap_att,
                                                                                    tmp_path, capsys):
    file = plant(hub_cache)
    by_id = _scores(capsys, swap_att, tmp_path / "by-id", "--model", name)
    by_file = _scores(capsys, swap_att, tmp_path / "by-file", "--model", "ViT-B-32-quickgelu", "--pretrained", file)
    pd.testing.assert_frame_equal(by_id, by_file, check_exact=True)
    record = json.loads((tmp_path / "by-id" / "sugarcrepe-swap_att.json").read_text())
    assert (record["model"], Path(record["pretrained"]).resolve()) == ("ViT-B-32-quickgelu", file.resolve())
    # `report --paper`: the id's results beside its own row of the paper, the same weights by file beside the paper's method
    from compclip.eval.report import paper_numbers

    code, _, err = run_main(capsys, "report", tmp_path / "by-id", tmp_path / "by-file", "--label", "by-id", "--label", "by-file",
                            "--paper", "c2lip", "--out", tmp_path / "report")
    assert code == 0, err[-2000:]
    row = {"ce-clip-b32": "CE-CLIP", "negclip-b32": "NegCLIP"}[name]
    table = pd.read_csv(tmp_path / "report" / "paper.csv", index_col=0)
    assert set(table["row"]) == {row, "C2LIP"} and table[table["row"] == "C2LIP"]["by-id"].isna().all()
    mine, theirs = table[table["row"] == row].loc["SC swap att"], table[table["row"] == "C2LIP"].loc["SC swap att"]
    published = {r["model"]: r["values"]["SC swap att"] for r in paper_numbers("c2lip")["rows"] if "SC swap att" in r["values"]}
    acc = 100 * record["metrics"]["swap_att"]["acc"]
    assert (mine["paper"], theirs["paper"]) == (published[row], published["C2LIP"])
    assert mine["by-id"] == pytest.approx(acc, abs=0.01) and mine["by-id − paper"] == pytest.approx(acc - published[row], abs=0.01)
    assert theirs["by-file"] == pytest.approx(acc, abs=0.01) and pd.isna(mine["by-file"])
    text = (tmp_path / "report" / "paper.md").read_text()
    assert f"row '{row}'" in text and "row 'C2LIP'" in text
    # the file's hash was recorded at its first load, and a byte changed since is refused naming both hashes
    recorded = (hub_cache / "compclip-released" / f"{name}.sha256").read_text().split()[0]
    assert recorded == record["weights_sha256"]
    data = bytearray(file.resolve().read_bytes())
    data[-100] ^= 1
    file.resolve().write_bytes(bytes(data))
    code, _, err = run_main(capsys, "-q", "eval", "--model", name, "--benchmark", "sugarcrepe/swap_att", "--data-root", swap_att,
                            "--workers", "0", "--out", tmp_path / "again")
    assert code == 2
    assert re.fullmatch(rf"error: {re.escape(str(file))}: SHA-256 (?!{recorded})[0-9a-f]{{64}}, but {recorded} is the one its first "
                        r"load recorded in .+\n", err), err


def test_a_transformers_entry_scores_as_its_hub_id_with_the_score_its_row_used(hub_cache, swap_att, tmp_path, capsys):
    """OC-CLIP's BLIP row: a tiny random BLIP retrieval model at the real repository's cache path, scored by the id as by
    `--model hf:Salesforce/blip-itm-base-coco --blip-score itm+itc` (ARO's score, which OC-CLIP quotes)."""
    from test_transformers_models import tiny_model

    folder = tiny_model("blip", tmp_path / "blip")
    plant_hub_repo(hub_cache, "Salesforce/blip-itm-base-coco", {f.name: f.read_bytes() for f in folder.iterdir()}, absent=())
    by_id = _scores(capsys, swap_att, tmp_path / "by-id", "--model", "blip-itm-base-coco")
    by_hub = _scores(capsys, swap_att, tmp_path / "by-hub", "--model", "hf:Salesforce/blip-itm-base-coco", "--blip-score", "itm+itc")
    pd.testing.assert_frame_equal(by_id, by_hub, check_exact=True)


def test_a_released_id_loads_through_the_library_as_through_the_command_line(hub_cache):
    from compclip.models import load_model, weights_sha256

    file = _ce_clip(hub_cache)
    model, _, _ = load_model("ce-clip-b32")
    assert model.compclip_spec["model_name"] == "ViT-B-32-quickgelu" and model.compclip_spec["pretrained"] == str(file)
    assert weights_sha256(model) == (hub_cache / "compclip-released" / "ce-clip-b32.sha256").read_text().split()[0]


def test_a_release_keeping_its_weights_under_another_key_loads_them_from_there(hub_cache):
    """CoN-CLIP's checkpoint holds its state dict under "model" (its README's `model.load_state_dict(ckpt['model'])`)."""
    from compclip.models import load_model

    path = hand_path(get_released("conclip-b32"))
    path.parent.mkdir(parents=True)
    state = _state()
    torch.save({"model": state, "epoch": 3}, path)
    model, _, _ = load_model("conclip-b32")
    assert model.compclip_spec["model_name"] == "ViT-B-32-quickgelu"
    loaded = model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def _lora_shapes(rank=4):
    """The LoRA halves of every layer DAC's fork trains them in (`--lora 4`), in the shapes its loralib gives them:
    Linear A (r, in) and B (out, r) beside the module's weight, the attention's packed projection its own
    `in_proj_weight_lora_A`/`_B`, the patch embedding's Conv2d A (r·k, in·k) and B (out·k, r·k) for its kernel k = 32."""
    shapes = {}

    def put(prefix, out_dim, in_dim, k=1):
        shapes[prefix + "lora_A"], shapes[prefix + "lora_B"] = (rank * k, in_dim * k), (out_dim * k, rank * k)

    put("visual.conv1.", 768, 3, 32)
    for tower, width in (("visual.", 768), ("", 512)):
        for i in range(12):
            block = f"{tower}transformer.resblocks.{i}."
            put(block + "attn.in_proj_weight_", 3 * width, width)
            put(block + "attn.out_proj.", width, width)
            put(block + "mlp.c_fc.", 4 * width, width)
            put(block + "mlp.c_proj.", width, 4 * width)
    return shapes


def _lora_halves():
    g = torch.Generator().manual_seed(2)
    return {k: 0.05 * torch.randn(shape, generator=g) for k, shape in _lora_shapes().items()}


def _unmerged(sd, lora, images, tokens, s=0.25):
    """The embeddings of DAC's model with its LoRA unmerged, written out: each LoRA layer x Wᵀ + b + s·(x Aᵀ) Bᵀ (loralib's
    Linear, the fork's multi_head_attention_forward for q, k, v), the patches convolved with W + s·(B A).view(W.shape)
    (loralib's Conv2d), s = lora_alpha / r = 1/4; QuickGELU, pre-norm blocks, the text's causal mask and its EOT token."""
    import torch.nn.functional as F

    def ln(x, name):
        return F.layer_norm(x, x.shape[-1:], sd[name + ".weight"], sd[name + ".bias"])

    def linear(x, name):
        return x @ sd[name + ".weight"].T + sd[name + ".bias"] + s * (x @ lora[name + ".lora_A"].T) @ lora[name + ".lora_B"].T

    def block(x, p, heads, mask):
        n, length, d = x.shape
        h = ln(x, p + "ln_1")
        qkv = (h @ sd[p + "attn.in_proj_weight"].T + sd[p + "attn.in_proj_bias"]
               + s * (h @ lora[p + "attn.in_proj_weight_lora_A"].T) @ lora[p + "attn.in_proj_weight_lora_B"].T)
        q, k, v = (t.reshape(n, length, heads, d // heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        att = ((q @ k.transpose(-1, -2)) / (d // heads) ** 0.5 + mask).softmax(-1) @ v
        x = x + linear(att.transpose(1, 2).reshape(n, length, d), p + "attn.out_proj")
        h = linear(ln(x, p + "ln_2"), p + "mlp.c_fc")
        return x + linear(h * torch.sigmoid(1.702 * h), p + "mlp.c_proj")

    conv = sd["visual.conv1.weight"] + s * (lora["visual.conv1.lora_B"] @ lora["visual.conv1.lora_A"]).view(768, 3, 32, 32)
    x = F.conv2d(images, conv, stride=32).flatten(2).transpose(1, 2)
    x = torch.cat([sd["visual.class_embedding"].expand(len(x), 1, -1), x], dim=1) + sd["visual.positional_embedding"]
    x = ln(x, "visual.ln_pre")
    for i in range(12):
        x = block(x, f"visual.transformer.resblocks.{i}.", 12, 0.0)
    image = ln(x[:, 0], "visual.ln_post") @ sd["visual.proj"]
    x = sd["token_embedding.weight"][tokens] + sd["positional_embedding"]
    causal = torch.full((77, 77), float("-inf")).triu(1)
    for i in range(12):
        x = block(x, f"transformer.resblocks.{i}.", 8, causal)
    text = ln(x, "ln_final")[torch.arange(len(tokens)), tokens.argmax(dim=-1)] @ sd["text_projection"]
    return image, text


def test_a_lora_checkpoint_loads_merged_and_embeds_as_its_layers_unmerged(hub_cache):
    """DAC-LLM's checkpoint as DAC's training/main.py saves it (the weights and LoRA halves under "state_dict", a
    distributed run's `module.` before each key, the optimizer beside them), loaded by the id: its image and text
    embeddings are the unmerged LoRA model's."""
    import open_clip

    from compclip.models import load_model

    state, lora = _state(), _lora_halves()
    path = hand_path(get_released("dac-llm-b32"))
    path.parent.mkdir(parents=True)
    torch.save({"epoch": 5, "name": "dac-llm", "state_dict": {f"module.{k}": v for k, v in {**state, **lora}.items()},
                "optimizer": {"state": {}, "param_groups": [{"lr": 5e-6, "params": list(range(len(lora)))}]}}, path)
    model, _, _ = load_model("dac-llm-b32")
    assert model.compclip_spec["model_name"] == "ViT-B-32-quickgelu"
    images = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    tokens = open_clip.tokenize(["a red dog beside a blue cat", "a blue dog beside a red cat"])
    with torch.no_grad():
        image, text = model.encode_image(images), model.encode_text(tokens)
        want_image, want_text = _unmerged(state, lora, images, tokens)
    torch.testing.assert_close(image, want_image, atol=1e-5, rtol=0)
    torch.testing.assert_close(text, want_text, atol=1e-5, rtol=0)


@pytest.mark.parametrize("keys,said", [
    ({"visual.transformer.resblocks.3.mlp.c_fc.lora_A": (4, 768)},
     "visual.transformer.resblocks.3.mlp.c_fc.lora_A is there but visual.transformer.resblocks.3.mlp.c_fc.lora_B is not, the other "
     "half of visual.transformer.resblocks.3.mlp.c_fc.weight's LoRA"),
    ({"transformer.resblocks.0.attn.in_proj_weight_lora_A": (8, 512), "transformer.resblocks.0.attn.in_proj_weight_lora_B": (1536, 8)},
     "transformer.resblocks.0.attn.in_proj_weight_lora_A has shape (8, 512), but a rank-4 LoRA of "
     "transformer.resblocks.0.attn.in_proj_weight (1536, 512) has (4, 512)"),
    ({"token_embedding.lora_A": (4, 49408), "token_embedding.lora_B": (512, 4)},
     "token_embedding.lora_A is a LoRA half the merge cannot place: no layer of ViT-B-32-quickgelu the release trains LoRA in"),
    ({}, "lacks transformer.resblocks.0.attn.in_proj_weight_lora_A and transformer.resblocks.0.attn.in_proj_weight_lora_B, the LoRA "
         "of transformer.resblocks.0.attn.in_proj_weight that the release trains"),
    (_lora_shapes() | {"visual.transformer.resblocks.0.attn.bias_k": (1, 1, 768)},
     "visual.transformer.resblocks.0.attn.bias_k is no weight of open_clip's ViT-B-32-quickgelu: the merge cannot place it"),
    (_lora_shapes() | {"visual.proj": (512, 768)}, "visual.proj has shape (512, 768), but open_clip's ViT-B-32-quickgelu has (768, 512)"),
    (_lora_shapes(), "lacks positional_embedding, a weight of open_clip's ViT-B-32-quickgelu (and 300 more)"),
], ids=["half_only", "rank8", "unplaced", "no_lora", "unknown_key", "transposed", "lacking"])
def test_a_lora_checkpoint_missing_a_half_of_another_rank_or_with_a_key_it_cannot_place_is_one_line_naming_the_key(
        keys, said, hub_cache, swap_att, tmp_path, capsys):
    path = hand_path(get_released("dac-sam-b32"))
    path.parent.mkdir(parents=True)
    torch.save({"epoch": 5, "state_dict": {"module.logit_scale": torch.tensor(4.6)} | {f"module.{k}": torch.zeros(v)
                                                                                        for k, v in keys.items()}}, path)
    code, _, err = run_main(capsys, "-q", "eval", "--model", "dac-sam-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: {said}"), err


def test_a_hand_downloaded_file_not_there_is_one_line_saying_where_to_get_it_and_where_to_put_it(hub_cache, swap_att, tmp_path,
                                                                                                  capsys):
    code, _, err = run_main(capsys, "-q", "eval", "--model", "negclip-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--out", tmp_path / "out")
    path = hub_cache / "compclip-released" / "negclip-b32" / "negclip.pth"
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: negclip-b32: {path} is not there. Download negclip.pth from the Google Drive link")
    assert err.endswith(f"Save it as {path} (or give the file to --pretrained, or as --model ViT-B-32-quickgelu --pretrained FILE)\n")
    # CoN-CLIP's file keeps its weights under "model": open_clip's --pretrained FILE would not load it, the id does
    from compclip.errors import MissingFileError
    from compclip.models.released import resolve

    with pytest.raises(MissingFileError, match=r"conclip-b32\.pt \(or give the file to --pretrained\)$"):
        resolve(get_released("conclip-b32"))


def test_a_hub_file_not_in_the_cache_offline_is_one_line_naming_the_repository_file_and_cache(hub_cache, swap_att, tmp_path, capsys):
    code, _, err = run_main(capsys, "-q", "eval", "--model", "ce-clip-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: ce-clip-b32: le723z/CE_CLIP/CE_CLIP.pt is not in the Hugging Face cache {hub_cache}, and "
                          "HF_HUB_OFFLINE forbids downloading it")


def test_an_entry_that_cannot_load_is_one_line_with_its_reason(hub_cache, swap_att, tmp_path, capsys):
    code, _, err = run_main(capsys, "-q", "eval", "--model", "svlc-r-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--out", tmp_path / "out")
    assert code == 2
    assert err == f"error: svlc-r-b32 ({get_released('svlc-r-b32').name}) cannot be loaded: {get_released('svlc-r-b32').unavailable}\n"


def test_compclip_models_lists_every_entry_and_whether_its_weights_are_here(hub_cache, capsys):
    _ce_clip(hub_cache)
    plant_hub_repo(hub_cache, "timm/vit_base_patch32_clip_224.openai", {"open_clip_model.safetensors": b"weights"})  # open_clip's own
    code, out, _ = run_main(capsys, "models")
    assert code == 0
    said = dict(re.findall(r"^(\S+): .* \((cached|not cached|unavailable: .+)\)$", out, re.M))
    assert sorted(said) == list_released()
    assert said["ce-clip-b32"] == said["openai-clip-b32"] == "cached"
    assert said["negclip-b32"] == said["openai-clip-b16"] == said["clic-laion-b32"] == said["flava-full"] == "not cached"
    assert said["svlc-r-b32"] == f"unavailable: {get_released('svlc-r-b32').unavailable}"
    code, out, _ = run_main(capsys, "models", "--ids")
    assert out.split() == [e.id for e in ENTRIES if e.loads_as is not None]


def test_the_models_page_lists_every_entry():
    page = DOCS.read_text()
    for e in ENTRIES:
        assert f"`{e.id}`" in page, e.id
