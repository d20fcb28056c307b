"""The registry of released checkpoints (`compclip models`, `eval --model ID`): every row of the four papers' tables in
exactly one entry, each loadable entry naming what open_clip's own registry knows; a Hub file and a hand-downloaded file
(stand-ins of random weights at the real cache paths, offline) score exactly as the same file through `--model ARCH
--pretrained FILE`; a file that changed after its first load, one not there and an entry that cannot load are each one
`error:` line."""
import json
import os
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from compclip.eval.report import list_papers, paper_numbers
from compclip.io import sha256_of
from compclip.models.released import cache_root, get_released, hand_path, list_released
from conftest import image_bytes, plant_hub_repo, run_main

ENTRIES = [get_released(i) for i in list_released()]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "models.md"


UCSC_CLIPS = "UCSC-VLAA/ViT-L-14-CLIPS-224-Recap-DataComp-1B"  # the repository CLIC's models.py takes CLIPS's tokenizer from
CLIPS_L14 = "ViT-L-14-CLIPS"  # no open_clip architecture: `clips_config` of CLIPA's ViT-L-14
# CLIPS's WordPiece ids as CLIC's clips/tokenizer.py writes them: [PAD] 0, the start and end of text 1 and 2
# (bert-base-uncased's [unused0] and [unused1]), the class token [CLS] 101; the other stand-ins' words between
CLIPS_VOCAB = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[SEP]", "[MASK]", "a", "dog", "cat", "red", "blue", "on", "the", "mat",
               "is", "of", "photo", "green", "under", "big", "small", "beside"]
CLIPS_VOCAB += [f"[unused{i}]" for i in range(2, 103 - len(CLIPS_VOCAB))] + ["[CLS]"]


def clips_config(base: dict, tokenizer_mode: str | None = "clips") -> dict:
    """A CLIPS open_clip_config.json's model_cfg: CLIPA's towers (the same group's) with CLIPS's 80-token text, tanh GELU
    and its tokenizer, the repository's own WordPiece in open_clip's 'clips' mode (`tokenizer_mode` None: a config
    without it, which open_clip tokenizes as plain BERT)."""
    import copy

    cfg = copy.deepcopy(base)
    cfg["text_cfg"].update(context_length=80, hf_tokenizer_name=UCSC_CLIPS, act_kwargs={"approximate": "tanh"})
    cfg["vision_cfg"]["act_kwargs"] = {"approximate": "tanh"}
    if tokenizer_mode:
        cfg["text_cfg"]["tokenizer_mode"] = tokenizer_mode
    return cfg


def _clips_tokenizer(snapshot: Path) -> None:
    """CLIPS's tokenizer files as its repository serves them: a WordPiece whose start and end of text are ids 1 and 2."""
    from transformers import BertTokenizerFast

    (snapshot / "vocab.txt").write_text("\n".join(CLIPS_VOCAB) + "\n")
    BertTokenizerFast(str(snapshot / "vocab.txt"), bos_token="[unused0]", eos_token="[unused1]").save_pretrained(snapshot)


def _plant_clips_tokenizer(hub: Path, model_cfg: dict, preprocess: dict | None = None) -> Path:
    """CLIPS's repository as the tokenizer's source: its open_clip_config.json and tokenizer files; returns the config."""
    config = json.dumps({"model_cfg": model_cfg, "preprocess_cfg": preprocess or {}}).encode()
    return plant_hub_repo(hub, UCSC_CLIPS, {"open_clip_config.json": config, "tokenizer": _clips_tokenizer}) / "open_clip_config.json"


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


def swap_att_split(root: Path, items: int) -> Path:
    """SugarCrepe's swap_att split of `items` items under `root`, their images under their COCO names."""
    (root / "coco" / "val2017").mkdir(parents=True)
    (root / "sugarcrepe").mkdir()
    records = {}
    for i in range(items):
        name = f"{i + 1:012d}.jpg"
        (root / "coco" / "val2017" / name).write_bytes(image_bytes(i))
        records[str(i)] = {"filename": name, "caption": f"a red dog beside a blue cat {i}",
                           "negative_caption": f"a blue dog beside a red cat {i}"}
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    return root


@pytest.fixture
def swap_att(tmp_path):
    """SugarCrepe's swap_att split of four items."""
    return swap_att_split(tmp_path / "bench", 4)


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


def test_an_openai_fine_tune_with_gelu_after_its_id_runs_its_file_under_plain_gelu(hub_cache, swap_att, tmp_path, capsys):
    """`negclip-b32-gelu`: NegCLIP's file under open_clip's ViT-B-32, as its release's own loader builds it and C2LIP's
    row was scored: each residual block's activation torch's GELU, every embedding open_clip's own ViT-B-32's with the
    same weights; `negclip-b32` stays QuickGELU. Its results record the activation they ran, in a folder of their own
    name, and `report --paper c2lip` sets them beside the row unmarked, saying they ran its activation."""
    import open_clip
    from open_clip.transformer import QuickGELU

    from compclip.eval.sweep import folder_name
    from compclip.models import load_model

    file = _negclip(hub_cache)
    reference = open_clip.create_model("ViT-B-32").eval()
    reference.load_state_dict(torch.load(file, weights_only=True)["state_dict"])
    gelu, quick = load_model("negclip-b32-gelu")[0], load_model("negclip-b32")[0]
    activations = lambda m: {type(b.mlp.gelu) for tower in (m.visual.transformer, m.transformer) for b in tower.resblocks}  # noqa: E731
    assert activations(gelu) == {torch.nn.GELU} and activations(quick) == {QuickGELU}
    torch.manual_seed(0)
    inputs = {"encode_image": torch.randn(2, 3, 224, 224), "encode_text": open_clip.tokenize(["a red dog", "a blue cat"])}
    with torch.no_grad():
        for encode, x in inputs.items():
            assert torch.equal(getattr(gelu, encode)(x), getattr(reference, encode)(x)), encode
            assert not torch.allclose(getattr(quick, encode)(x), getattr(reference, encode)(x), atol=1e-4), encode
    assert folder_name("negclip-b32-gelu") != folder_name("negclip-b32")  # a sweep of both writes two folders
    out = tmp_path / folder_name("negclip-b32-gelu")
    code, _, err = run_main(capsys, "-q", "eval", "--model", "negclip-b32-gelu", "--benchmark", "sugarcrepe/swap_att",
                            "--data-root", swap_att, "--workers", "0", "--out", out)
    assert code == 0, err[-3000:]
    record = json.loads((out / "sugarcrepe-swap_att.json").read_text())
    assert (record["model"], record["released"], record["activation"]) == ("ViT-B-32", "negclip-b32", "gelu")
    code, _, err = run_main(capsys, "report", out, "--paper", "c2lip", "--out", tmp_path / "report")
    assert code == 0, err[-2000:]
    text = (tmp_path / "report" / "paper.md").read_text()
    assert "scores the weights so; negclip-b32-gelu ran plain GELU." in text and "activation=" not in text


def test_a_gelu_ids_absent_file_is_one_line_whose_command_loads_it_under_gelu(hub_cache, swap_att, tmp_path, capsys):
    """`negclip-b32-gelu` without its file: the line names the id as given, and the command it suggests, run as typed with
    a copy of the file, scores the weights under plain GELU (not the QuickGELU entry the id without `-gelu` loads)."""
    code, _, err = run_main(capsys, "-q", "eval", "--model", "negclip-b32-gelu", "--benchmark", "sugarcrepe/swap_att",
                            "--data-root", swap_att, "--workers", "0", "--out", tmp_path / "none")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: negclip-b32-gelu: "), err
    suggested = err.rstrip("\n").rsplit("load a copy kept elsewhere: ", 1)[1].split()
    assert suggested == ["--model", "negclip-b32-gelu", "--pretrained", "FILE"], err
    copy = tmp_path / "negclip.pth"
    torch.save({"epoch": 5, "name": "negclip", "state_dict": _state()}, copy)
    typed = [str(copy) if word == "FILE" else word for word in suggested]
    code, _, err = run_main(capsys, "-q", "eval", *typed, "--benchmark", "sugarcrepe/swap_att", "--data-root", swap_att,
                            "--workers", "0", "--out", tmp_path / "out")
    assert code == 0, err[-3000:]
    record = json.loads((tmp_path / "out" / "sugarcrepe-swap_att.json").read_text())
    assert (record["model"], record["activation"]) == ("ViT-B-32", "gelu")


def test_gelu_after_an_id_that_runs_no_quickgelu_file_is_one_line(hub_cache, swap_att, tmp_path, capsys):
    code, _, err = run_main(capsys, "-q", "eval", "--model", "siglip-b16-webli-gelu", "--benchmark", "sugarcrepe/swap_att",
                            "--data-root", swap_att, "--workers", "0", "--out", tmp_path / "out")
    assert code == 2 and err == ("error: siglip-b16-webli-gelu: -gelu loads the weights file of a QuickGELU entry (an OpenAI "
                                 "fine-tune's, as negclip-b32) under plain GELU; siglip-b16-webli loads as ViT-B-16-SigLIP, and has "
                                 "no GELU variant\n"), err


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


# EVA-CLIP's names of the image tower's block modules, by open_clip's (timm's Eva) names: FineCLIP's eva_vit_model.py
# Attention (q_bias, v_bias beside bias-free q/k/v projections, the sub-LN inner_attn_ln) and SwiGLU (w1 the gate, w2, w3, ffn_ln)
EVA_CLIP_NAMES = {"attn.q_proj.bias": "attn.q_bias", "attn.v_proj.bias": "attn.v_bias", "attn.norm.weight": "attn.inner_attn_ln.weight",
                  "attn.norm.bias": "attn.inner_attn_ln.bias", "mlp.fc1_g.weight": "mlp.w1.weight", "mlp.fc1_g.bias": "mlp.w1.bias",
                  "mlp.fc1_x.weight": "mlp.w2.weight", "mlp.fc1_x.bias": "mlp.w2.bias", "mlp.fc2.weight": "mlp.w3.weight",
                  "mlp.fc2.bias": "mlp.w3.bias", "mlp.norm.weight": "mlp.ffn_ln.weight", "mlp.norm.bias": "mlp.ffn_ln.bias"}


def eva_clip_layout(state: dict) -> dict:
    """An open_clip EVA02 state dict as EVA-CLIP's `CustomCLIP` saves it: the image tower straight under `visual.` (no
    timm `trunk.`), each block's modules under EVA-CLIP's names (`EVA_CLIP_NAMES`), the text tower and logit scale as
    open_clip has them, and the rotary tables EVA-CLIP keeps as buffers, the tower's and each block's attention's."""
    saved = {}
    for key, value in state.items():
        block = re.fullmatch(r"visual\.trunk\.(blocks\.\d+)\.(.+)", key)
        if block:
            saved[f"visual.{block[1]}.{EVA_CLIP_NAMES.get(block[2], block[2])}"] = value
        else:
            saved[key.replace("visual.trunk.", "visual.", 1)] = value
    tables = torch.arange(196 * 64, dtype=torch.float32).reshape(196, 64)
    blocks = sorted({m[1] for k in state if (m := re.match(r"visual\.trunk\.blocks\.(\d+)\.", k))}, key=int)
    for where in ["visual.rope", *(f"visual.blocks.{b}.attn.rope" for b in blocks)]:
        saved[f"{where}.freqs_cos"], saved[f"{where}.freqs_sin"] = tables.cos(), tables.sin()
    return saved


def _eva02_b16_state() -> dict:
    """Random weights of open_clip's EVA02-B-16, seeded, without building the model's own initialisation."""
    import open_clip

    with torch.device("meta"):
        shapes = open_clip.create_model("EVA02-B-16", device="meta").state_dict()
    g = torch.Generator().manual_seed(5)
    return {k: 0.02 * torch.randn(v.shape, generator=g) for k, v in shapes.items()}


@pytest.mark.parametrize("layout", ["eva_clip", "open_clip"])
def test_fineclips_checkpoint_in_eva_clips_key_names_loads_into_open_clips_eva02_b16(layout, hub_cache, swap_att, tmp_path, capsys):
    """FineCLIP's FineCLIP_coco_vitb16.pt as its training/main.py saves it (the model's state dict under "state_dict",
    beside the epoch, run name and optimizer), its keys EVA-CLIP's: `--model fineclip-coco-b16` loads it into open_clip's
    EVA02-B-16, every weight the file's, and scores. A file under open_clip's own names is not FineCLIP's: one line."""
    state = _eva02_b16_state()
    path = hand_path(get_released("fineclip-coco-b16"))
    path.parent.mkdir(parents=True)
    torch.save({"epoch": 10, "name": "train_vitb16", "state_dict": eva_clip_layout(state) if layout == "eva_clip" else state,
                "optimizer": {"state": {}, "param_groups": []}}, path)
    capsys.readouterr()  # what making the stand-in's weights logged
    code, _, err = run_main(capsys, "-q", "eval", "--model", "fineclip-coco-b16", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--workers", "0", "--out", tmp_path / "out")
    if layout == "open_clip":
        assert (code, err.count("\n")) == (2, 1), err
        assert err.startswith(f"error: {path}: no visual.pos_embed, so no EVA-CLIP image tower where the release keeps its weights"), err
        return
    assert code == 0, err[-3000:]
    from compclip.models import load_model

    model, _, _ = load_model("fineclip-coco-b16")
    assert model.compclip_spec["model_name"] == "EVA02-B-16"
    loaded = model.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items())


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
    assert err.endswith(f"Save it as {path}, or load a copy kept elsewhere: --model negclip-b32 --pretrained FILE\n")
    # CoN-CLIP's file keeps its weights under "model": open_clip's --pretrained FILE would not load it, the id does
    from compclip.errors import MissingFileError
    from compclip.models.released import resolve

    with pytest.raises(MissingFileError, match=r"conclip-b32\.pt, or load a copy kept elsewhere: --model conclip-b32 --pretrained FILE$"):
        resolve(get_released("conclip-b32"))


def test_a_hub_file_not_in_the_cache_offline_is_one_line_naming_the_repository_file_and_cache(hub_cache, swap_att, tmp_path, capsys):
    code, _, err = run_main(capsys, "-q", "eval", "--model", "ce-clip-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: ce-clip-b32: le723z/CE_CLIP/CE_CLIP.pt is not in the Hugging Face cache {hub_cache}, and "
                          "HF_HUB_OFFLINE forbids downloading it")


def test_a_hub_repository_in_the_cache_without_its_weights_is_one_line_not_a_random_model(hub_cache, swap_att, tmp_path, capsys):
    """A cache holding CLIC's open_clip_config.json but not its weights (a download cut short, or only the tokenizer's
    config fetched): open_clip would build the architecture randomly initialised after a logged warning and score it."""
    import open_clip

    config = {"model_cfg": open_clip.get_model_config("ViT-B-32-quickgelu"), "preprocess_cfg": {}}
    plant_hub_repo(hub_cache, "nmndeep/CLIC-ViT-B-32-224-CogVLM", {"open_clip_config.json": json.dumps(config).encode()})
    code, _, err = run_main(capsys, "-q", "eval", "--model", "clic-laion-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--workers", "0", "--out", tmp_path / "out")
    assert (code, err.count("\n")) == (2, 1), err
    assert err == (f"error: clic-laion-b32: nmndeep/CLIC-ViT-B-32-224-CogVLM/open_clip_model.safetensors or "
                   f"open_clip_pytorch_model.bin is not in the Hugging Face cache {hub_cache}, and HF_HUB_OFFLINE forbids "
                   "downloading it: run once online, set HF_HUB_CACHE to a cache that holds it (`compclip models --fetch-list` "
                   "says what goes where), or load a copy you have: --model clic-laion-b32 --pretrained FILE "
                   "(open_clip_config.json beside it)\n")
    assert not (tmp_path / "out" / "sugarcrepe-swap_att.json").exists()
    code, _, err = run_main(capsys, "-q", "eval", "--model", "hf-hub:nmndeep/CLIC-ViT-B-32-224-CogVLM", "--benchmark",
                            "sugarcrepe/swap_att", "--data-root", swap_att, "--workers", "0", "--out", tmp_path / "plain")
    assert (code, err.count("\n")) == (2, 1), err  # the repository named as open_clip names it, not by the registry's id
    assert "CogVLM/open_clip_model.safetensors or open_clip_pytorch_model.bin, its weights, is not in the Hugging Face cache" in err
    assert not (tmp_path / "plain" / "sugarcrepe-swap_att.json").exists()


# a model of CLIPS's layout small enough to build in a moment (`clips_config` of it is CLIPS's text and tokenizer)
TINY_CLIPS_TOWERS = {"embed_dim": 32,
                     "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16, "no_ln_pre": True,
                                    "pool_type": "avg", "final_ln_after_pool": True},
                     "text_cfg": {"vocab_size": len(CLIPS_VOCAB), "width": 32, "heads": 2, "layers": 1, "pool_type": "last",
                                  "no_causal_mask": True}}


@pytest.mark.parametrize("tokenizer_mode", ["clips", None], ids=["clips_mode", "no_mode"])
def test_a_clips_fine_tune_tokenizes_as_clips_and_a_clips_config_without_its_mode_is_one_line(tokenizer_mode, hub_cache, swap_att,
                                                                                              tmp_path, capsys):
    """CLIC's CLIPS fine-tune, its repository's config naming bert-base-uncased (open_clip would give plain BERT tokens,
    [CLS] ... [SEP]), tokenizes with CLIPS's tokenizer from UCSC-VLAA's repository as CLIC's models.py does: each
    caption's WordPiece ids between 1 and 2, zeros after, 101 in the last place (CLIC's clips/tokenizer.py). A CLIPS
    config without text_cfg.tokenizer_mode 'clips' is refused in one line naming it, not scored with BERT tokens."""
    import open_clip
    from safetensors.torch import save_file

    model_cfg = clips_config(TINY_CLIPS_TOWERS, tokenizer_mode=None)
    model_cfg["text_cfg"].update(hf_tokenizer_name="bert-base-uncased", tokenizer_kwargs={"strip_sep_token": True})
    torch.manual_seed(0)
    config = json.dumps({"model_cfg": model_cfg, "preprocess_cfg": {}}).encode()
    snapshot = plant_hub_repo(hub_cache, "nmndeep/CLIC-CLIPS-ViT-L-14-224-CogVLM", {"open_clip_config.json": config})
    save_file(open_clip.CLIP(**model_cfg).state_dict(), str(snapshot / "open_clip_model.safetensors"))
    plant_hub_repo(hub_cache, "bert-base-uncased", {"tokenizer": _bert_tokenizer})
    clips = _plant_clips_tokenizer(hub_cache, clips_config(TINY_CLIPS_TOWERS, tokenizer_mode))
    code, _, err = run_main(capsys, "-q", "eval", "--model", "clic-laion-clips-l14", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--workers", "0", "--out", tmp_path / "out")
    if tokenizer_mode is None:
        assert (code, err.count("\n")) == (2, 1), err
        assert err.startswith(f"error: {clips}: model_cfg.text_cfg.tokenizer_mode is None, not 'clips': open_clip would tokenize "
                              "clic-laion-clips-l14's text as plain BERT tokens"), err
        assert not (tmp_path / "out" / "sugarcrepe-swap_att.json").exists()
        return
    assert code == 0, err[-3000:]
    from compclip.models import load_model

    model, _, tokenizer = load_model("clic-laion-clips-l14")
    captions = ["a red dog beside a blue cat", "the cat is small"]
    words = [[CLIPS_VOCAB.index(w) for w in caption.split()] for caption in captions]
    assert torch.equal(tokenizer(captions), torch.tensor([[1, *ids, 2] + [0] * (80 - 3 - len(ids)) + [101] for ids in words]))
    assert model.compclip_spec["tokenizer"] == {"source": f"hf-hub:{UCSC_CLIPS}", "context_length": 80}


def fg_clip_repository(clip: Path, **extra) -> dict:
    """The files of FG-CLIP's Hub repository made from a plain CLIPModel folder: its config naming FGCLIPModel through the
    repository's own Python (`auto_map`), its weights with FG-CLIP's own beside CLIP's (fgclip.py: the long captions'
    projection and 248-position embeddings, the training losses' logit scales), and `extra` weights."""
    from safetensors.torch import load_file, save_file

    config = json.loads((clip / "config.json").read_text())
    config.update(architectures=["FGCLIPModel"], auto_map={"AutoModel": "modeling_fgclip.FGCLIPModel"})
    state = load_file(clip / "model.safetensors")
    width, projection = state["text_projection.weight"].shape[1], state["text_projection.weight"].shape[0]
    g = torch.Generator().manual_seed(4)
    state |= {"text_filip_projection.weight": torch.randn(projection, width, generator=g), "logit_scale_finegraind": torch.tensor(2.5),
              "logit_scale_hardneg": torch.tensor(2.5), **extra,
              **{f"text_model.embeddings.position_embedding_{k}.weight": torch.randn(248, width, generator=g) for k in ("res", "ori")}}
    save_file(state, str(clip / "fg.safetensors"))
    files = {f.name: f.read_bytes() for f in clip.iterdir() if f.name not in ("config.json", "model.safetensors", "fg.safetensors")}
    files |= {"config.json": json.dumps(config).encode(), "model.safetensors": (clip / "fg.safetensors").read_bytes()}
    (clip / "fg.safetensors").unlink()
    return files


@pytest.mark.parametrize("extra", [{}, {"text_model.dense_head.weight": torch.zeros(4, 16)}], ids=["fg_clip", "unplaced_key"])
def test_fg_clips_repository_scores_as_the_plain_clip_its_short_captions_run(extra, hub_cache, swap_att, tmp_path, capsys):
    """FG-CLIP's repository (FGCLIPModel through its own Python, with its long-caption weights) by the id scores exactly as
    the CLIPModel of the same CLIP weights does (its short captions' computation), no repository code run, and as the new
    weights once the repository's are replaced; a weight of no CLIPModel is one line naming it."""
    from conftest import HUB_COMMIT
    from test_transformers_models import tiny_model

    clip = tiny_model("clip", tmp_path / "clip")
    plant_hub_repo(hub_cache, "qihoo360/fg-clip-base", fg_clip_repository(clip, **extra), absent=())
    capsys.readouterr()  # what saving the stand-in logged
    if extra:
        code, _, err = run_main(capsys, "-q", "eval", "--model", "fg-clip-base", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                                swap_att, "--workers", "0", "--out", tmp_path / "out")
        assert (code, err.count("\n")) == (2, 1), err
        weights = hub_cache / "models--qihoo360--fg-clip-base" / "snapshots" / HUB_COMMIT / "model.safetensors"
        assert err == (f"error: {weights}: text_model.dense_head.weight is no weight of transformers' CLIPModel nor one FG-CLIP keeps "
                       "for long captions: not FG-CLIP's CLIP weights\n"), err
        assert not (hub_cache / "compclip-released" / "fg-clip-base" / "clip").exists()
        return
    by_id = _scores(capsys, swap_att, tmp_path / "by-id", "--model", "fg-clip-base")
    by_clip = _scores(capsys, swap_att, tmp_path / "by-clip", "--model", clip)
    pd.testing.assert_frame_equal(by_id, by_clip, check_exact=True)
    # the repository's weights replaced (a new revision): converted again, never the folder made from the old ones
    other = tiny_model("clip", tmp_path / "other", seed=1)
    plant_hub_repo(hub_cache, "qihoo360/fg-clip-base", fg_clip_repository(other), absent=())
    capsys.readouterr()
    again = _scores(capsys, swap_att, tmp_path / "again", "--model", "fg-clip-base")
    pd.testing.assert_frame_equal(again, _scores(capsys, swap_att, tmp_path / "by-other", "--model", other), check_exact=True)


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
    # an OpenAI fine-tune's QuickGELU weights file (open_clip_file under a -quickgelu architecture) also loads as ID-gelu
    takes_gelu = [e.id for e in ENTRIES if e.loads_as == "open_clip_file" and e.model.endswith("-quickgelu")]
    assert "negclip-b32" in takes_gelu and "openai-clip-b32" not in takes_gelu
    assert re.findall(r"^  (\S+)-gelu: the same file as (\S+) \(plain GELU", out, re.M) == [
        (i, get_released(i).model.removesuffix("-quickgelu")) for i in takes_gelu]
    code, out, _ = run_main(capsys, "models", "--ids")
    assert out.split() == [i for e in ENTRIES if e.loads_as is not None for i in (e.id, *[f"{e.id}-gelu"] * (e.id in takes_gelu))]


def test_the_models_page_lists_every_entry():
    page = DOCS.read_text()
    for e in ENTRIES:
        assert f"`{e.id}`" in page, e.id


# Every loadable entry, loaded by its id from a stand-in at the path a user's copy would be at (issue #84). The stand-ins'
# weights are random, of the registered architecture, made once per architecture and kept in fp16 (each loader casts to
# the model's fp32); a file is written once per architecture and format and hard-linked into each test's cache.
LOADABLE = [e for e in ENTRIES if e.loads_as is not None]
# the ViT-L entries of the default run: one per route that has any, all three of ViT-L-14's weights (made once); the
# others (CLIPA's, CLIPS's, SigLIP-L's, EVA02-L's, the second CLIC) and ViT-H's and ViT-bigG's run in `make test-released`
DEFAULT_LARGE = {"openai-clip-l14", "clic-laion-l14", "conclip-l14"}


def _architecture(entry) -> str | None:
    """The open_clip architecture of the entry's weights: its own `model`, or for a hub repository the one its
    open_clip_config.json is taken to hold (CLIC's ViTs fine-tune OpenAI's CLIP, so QuickGELU; open_clip has no CLIPS
    config, so CLIPS's repositories hold `CLIPS_L14`, `clips_config` of CLIPA's ViT-L-14)."""
    if entry.loads_as in ("open_clip", "open_clip_file"):
        return entry.model
    if entry.loads_as == "open_clip_hub":
        repo = entry.model.removeprefix("hf-hub:")
        if "CLIPS" in repo:
            return CLIPS_L14
        if "CLIPA" in repo:
            return "ViT-L-14-CLIPA"
        return re.search(r"ViT-[BL]-\d+", repo).group() + "-quickgelu"
    return None


def _model_config(arch: str) -> dict:
    import open_clip

    return clips_config(open_clip.get_model_config("ViT-L-14-CLIPA")) if arch == CLIPS_L14 else open_clip.get_model_config(arch)


def _loadable_params():
    for e in sorted(LOADABLE, key=lambda e: (_architecture(e) or "", e.id)):  # each architecture's entries together
        large = any(size in (_architecture(e) or "") for size in ("-L-", "-H-", "-bigG-")) and e.id not in DEFAULT_LARGE
        yield pytest.param(e.id, marks=[pytest.mark.slow] if large else [], id=e.id)


def test_the_default_run_loads_a_vit_l_entry_of_every_route_that_has_one():
    routes = {e.loads_as for e in LOADABLE if "-L-" in (_architecture(e) or "")}
    assert {get_released(i).loads_as for i in DEFAULT_LARGE} == routes
    assert all("-L-" in _architecture(get_released(i)) for i in DEFAULT_LARGE)


class StandIns:
    """Random weights per open_clip architecture (seeded, fp16, in memory while its entries run) and each file written
    once per architecture and format, hard-linked to wherever an entry's cache wants it."""

    def __init__(self, root: Path):
        self.root, self.states, self.files = root, {}, {}

    def state(self, arch: str) -> dict:
        if arch not in self.states:
            import open_clip

            self.states.clear()  # one architecture's weights in memory at a time (a ViT-L's are 0.9 GB)
            with torch.device("meta"):
                shapes = open_clip.CLIP(**_model_config(arch)).state_dict() if arch == CLIPS_L14 else \
                    open_clip.create_model(arch, device="meta").state_dict()
            g = torch.Generator().manual_seed(zlib.crc32(arch.encode()))
            self.states[arch] = {k: (0.02 * torch.randn(v.shape, generator=g)).half() for k, v in shapes.items()}
        return self.states[arch]

    def link(self, arch: str, how: str, to: Path) -> None:
        """The architecture's weights saved `how` (safetensors, a plain state dict, under a key), linked at `to`."""
        if (arch, how) not in self.files:
            from safetensors.torch import save_file

            state, file = self.state(arch), self.root / f"{arch}.{how}"
            if how == "safetensors":
                save_file(state, str(file))
            elif how == "eva_clip":  # as FineCLIP's training/main.py saves it, the keys EVA-CLIP's code names
                torch.save({"epoch": 10, "name": "train_vitb16", "state_dict": eva_clip_layout(state)}, file)
            elif how == "lora":  # as DAC's training/main.py saves it: a distributed run's keys, the LoRA halves beside
                torch.save({"epoch": 5, "state_dict": {f"module.{k}": v for k, v in {**state, **_lora_halves()}.items()}}, file)
            else:  # a plain state dict, or under the key its release keeps it under (open_clip's training: "state_dict")
                torch.save(state if how == "plain" else {"epoch": 5, how: state}, file)
            self.files[(arch, how)] = file
        to.parent.mkdir(parents=True, exist_ok=True)
        os.link(self.files[(arch, how)], to)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    import shutil

    made = StandIns(tmp_path_factory.mktemp("released-stand-ins"))
    yield made
    shutil.rmtree(made.root, ignore_errors=True)  # several GB


@pytest.fixture(scope="module")
def two_items(tmp_path_factory):
    """SugarCrepe's swap_att split of two items, for every entry of the module."""
    return swap_att_split(tmp_path_factory.mktemp("bench"), 2)


def _plant_open_clip(entry, arch: str, stand_ins: StandIns, hub: Path) -> tuple[dict, dict, dict, Path]:
    """The entry's weights where its route looks for them: an open_clip tag's at the repository and file open_clip's
    registry names, a hub repository with its open_clip_config.json and weights, a weights file in its release's layout
    at its Hub path or where it is saved by hand; a Hugging Face tokenizer the config names at its repository. Returns the
    model config and preprocessing the load must take, the weights it must hold (the stand-in's, LoRA's merged in fp32)
    and the file planted."""
    import open_clip

    from test_recipes import _stand_in_tokenizer

    cfg, state = _model_config(arch), dict(stand_ins.state(arch))
    if entry.loads_as == "open_clip":
        preprocess = open_clip.get_pretrained_cfg(entry.model, entry.pretrained)
        path = plant_hub_repo(hub, preprocess["hf_hub"].strip("/"), {}) / "open_clip_model.safetensors"
        stand_ins.link(arch, "safetensors", path)
    elif entry.loads_as == "open_clip_hub":  # as open_clip's push_to_hf_hub writes a repository
        pretrained_as = "ViT-L-14-CLIPA" if arch == CLIPS_L14 else arch  # CLIPS preprocesses as CLIPA does
        base = open_clip.get_pretrained_cfg(pretrained_as, open_clip.list_pretrained_tags_by_model(pretrained_as)[0])
        preprocess = {k: base[k] for k in ("mean", "std", "interpolation", "resize_mode")}
        config = json.dumps({"model_cfg": cfg, "preprocess_cfg": preprocess}).encode()
        path = plant_hub_repo(hub, entry.model.removeprefix("hf-hub:"), {"open_clip_config.json": config}) / "open_clip_model.safetensors"
        stand_ins.link(arch, "safetensors", path)
    else:
        preprocess = {"mean": open_clip.OPENAI_DATASET_MEAN}
        path = hand_path(entry) if entry.url else plant_hub_repo(hub, entry.hub_repo, {}) / entry.hub_file
        how = "lora" if entry.lora else entry.key_layout or entry.state_dict_key or ("state_dict" if entry.url else "plain")
        stand_ins.link(arch, how, path)
        if entry.lora:  # W + (B A)·alpha/r, written out: loralib's merge
            lora, scaling = _lora_halves(), entry.lora["alpha"] / entry.lora["rank"]
            for key in [k.removesuffix("lora_A") for k in lora if k.endswith("lora_A")]:
                weight = key + "weight" if key.endswith(".") else key.removesuffix("_")
                state[weight] = state[weight].float() + scaling * (lora[key + "lora_B"] @ lora[key + "lora_A"]).view(state[weight].shape)
    tokenizer = cfg["text_cfg"].get("hf_tokenizer_name")
    if entry.tokenizer:  # CLIPS's, from its own repository
        _plant_clips_tokenizer(hub, cfg, preprocess)
    elif tokenizer:
        plant_hub_repo(hub, tokenizer, {"tokenizer": _bert_tokenizer if tokenizer.startswith("bert-") else _stand_in_tokenizer})
    return cfg, preprocess, state, path


def _bert_tokenizer(snapshot: Path) -> None:
    """A WordPiece tokenizer as bert-base-uncased's repository serves one (CLIPA's and CLIPS's text tower strips its
    [SEP]), of a few words."""
    from transformers import BertTokenizerFast

    from test_transformers_models import WORDS

    (snapshot / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    BertTokenizerFast(str(snapshot / "vocab.txt")).save_pretrained(snapshot)


def _finite_scores(items: Path) -> None:
    scores = pd.read_parquet(items)[["score_true", "score_false"]].to_numpy()
    assert scores.shape == (2, 2) and np.isfinite(scores).all(), scores


@pytest.mark.parametrize("name", list(_loadable_params()))
def test_every_loadable_entry_loads_a_stand_in_at_its_real_path_by_its_id_and_scores(name, stand_ins, hub_cache, two_items, tmp_path,
                                                                                    capsys):
    """Issue #84: offline, each entry's stand-in (random weights of its architecture) where a user's copy would be; the id
    loads it with the registered architecture and settings (QuickGELU, image size, context length, preprocessing), its
    weights the stand-in's, and scores two SugarCrepe items."""
    import compclip
    from compclip.models import load_model

    entry = get_released(name)
    arch = _architecture(entry)
    if entry.loads_as == "transformers":
        from safetensors.torch import load_file

        from compclip.eval.scorer import load_scorer
        from test_transformers_models import KINDS, tiny_model

        repo = entry.model.removeprefix("hf:")
        kind = max((k for k in KINDS if k in repo.lower()), key=len)
        folder = tiny_model(kind, tmp_path / kind)
        files = fg_clip_repository(folder) if entry.key_layout == "fg_clip" else {f.name: f.read_bytes() for f in folder.iterdir()}
        plant_hub_repo(hub_cache, repo, files, absent=())
        from compclip.models.released import resolve

        model = load_scorer(resolve(entry).model, blip_score=entry.blip_score).model
        assert type(model).__name__ == json.loads((folder / "config.json").read_text())["architectures"][0]
        saved, loaded = load_file(folder / "model.safetensors"), model.state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in saved.items())
        code, _, err = run_main(capsys, "-q", "eval", "--model", name, "--benchmark", "sugarcrepe/swap_att", "--data-root", two_items,
                                "--workers", "0", "--out", tmp_path / "out")
        assert code == 0, err[-3000:]
        _finite_scores(tmp_path / "out" / "sugarcrepe-swap_att.items.parquet")
        return
    import open_clip

    cfg, preprocess, state, path = _plant_open_clip(entry, arch, stand_ins, hub_cache)
    model, transform, tokenizer = load_model(name)
    spec = model.compclip_spec
    assert (spec["model_name"], spec["model_cfg"]) == (entry.model, cfg)
    if entry.loads_as == "open_clip_file":  # the file itself, or where it is converted once when its weights sit under a key
        assert Path(spec["pretrained"]) == path if not entry.state_dict_key else Path(spec["pretrained"]).parent == cache_root() / entry.id
    else:
        assert spec["pretrained"] == entry.pretrained
    assert any(isinstance(m, open_clip.transformer.QuickGELU) for m in model.modules()) == cfg.get("quick_gelu", False)
    size = cfg["vision_cfg"]["image_size"]
    assert spec["preprocess_cfg"]["size"] in (size, [size, size]) and spec["preprocess_cfg"]["mean"] == list(preprocess["mean"])
    assert tokenizer.context_length == cfg["text_cfg"]["context_length"] == tokenizer(["a red dog"]).shape[1]
    loaded = model.state_dict()
    assert loaded.keys() == state.keys()
    wrong = [k for k, v in state.items() if not torch.allclose(loaded[k], v.float(), rtol=0, atol=1e-4 if entry.lora else 0)]
    assert not wrong, wrong[:5]
    compclip.evaluate(model, transform, tokenizer, "sugarcrepe/swap_att", data_root=two_items, out=tmp_path / "out", workers=0)
    _finite_scores(tmp_path / "out" / "sugarcrepe-swap_att.items.parquet")


def _conclip(state: dict) -> Path:
    """CoN-CLIP's file where compclip looks for it, its weights under "model" (converted once beside it)."""
    path = hand_path(get_released("conclip-b32"))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": state, "epoch": 3}, path)
    return path


def test_a_replaced_file_with_an_older_time_is_converted_again_and_its_own_weights_load(hub_cache):
    """`cp -p`, `rsync -a` and `unzip` give a new file the time it had: the conversion is redone because the file it was
    made from is not this one (size and SHA-256), whatever the times say."""
    from compclip.models import load_model

    first = _state()
    path = _conclip(first)
    load_model("conclip-b32")
    second = dict(first, logit_scale=torch.tensor(1.25))
    _conclip(second)
    os.utime(path, (1_000_000_000, 1_000_000_000))  # the replacement's own, older time
    record = hub_cache / "compclip-released" / "conclip-b32.sha256"
    from compclip.errors import DataError

    with pytest.raises(DataError, match=rf"or {re.escape(str(record))} if the release replaced it"):
        load_model("conclip-b32")
    record.unlink()  # as the message says
    model, _, _ = load_model("conclip-b32")
    assert float(model.state_dict()["logit_scale"]) == 1.25


class _Code:
    def __reduce__(self):
        return (print, ("a pickle that runs code",))


def _cut(path: Path) -> None:
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])


def _text_file(path: Path) -> None:
    """A page of text where the weights should be (what a failed download saves)."""
    path.parent.mkdir(parents=True)
    path.write_text("<html>Google Drive: too many users have viewed or downloaded this file recently</html>\n")


@pytest.mark.parametrize(("name", "plant", "said"), [
    ("conclip-b32", lambda: _cut(_conclip(_state())), "not a readable weights file, cut short or damaged (RuntimeError: "),
    ("negclip-b32", lambda: _cut(_negclip(None)), "not a readable weights file"),
    ("conclip-b32", lambda: torch.save({"model": {"visual.proj": _Code()}}, _conclip({})),
     "refused: it holds pickled objects that are not plain tensors (Unsupported global: GLOBAL print was not an allowed global by "
     "default.)\n"),
    ("negclip-b32", lambda: _text_file(hand_path(get_released("negclip-b32"))),
     "not a readable weights file: neither torch.save's archive nor a pickle"),
], ids=["cut_converted", "cut_loaded", "code_converted", "text_loaded"])
def test_a_cut_or_code_holding_file_is_one_line_and_its_hash_is_never_recorded(hub_cache, swap_att, tmp_path, capsys, name, plant,
                                                                               said):
    """The whole file, saved over it afterwards, loads: the refused one's SHA-256 was never recorded as the first load's."""
    plant()
    capsys.readouterr()  # what making the stand-in's weights logged
    path = hand_path(get_released(name))
    code, _, err = run_main(capsys, "-q", "eval", "--model", name, "--benchmark", "sugarcrepe/swap_att", "--data-root", swap_att,
                            "--workers", "0", "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {path}: {said}"), err
    assert sorted(p.name for p in (hub_cache / "compclip-released").iterdir()) == [name]
    torch.save({"model" if name == "conclip-b32" else "state_dict": _state()}, path)  # the whole file, saved over it
    _scores(capsys, swap_att, tmp_path / "whole", "--model", name)
    assert (hub_cache / "compclip-released" / f"{name}.sha256").read_text().split()[0] == sha256_of(path)


@pytest.mark.parametrize(("record", "said"), [
    (lambda r: r.write_bytes(b""), "holds no SHA-256 (a record cut short): delete it, and the next load records the file's"),
    (lambda r: r.symlink_to(r.name), "a symbolic link (to ce-clip-b32.sha256) where compclip writes its own file"),
], ids=["empty", "link_loop"])
def test_a_record_left_empty_or_a_link_at_it_is_one_line_naming_it(hub_cache, swap_att, tmp_path, capsys, record, said):
    """A full disk at the first load of an earlier release left the record empty; a link planted there loops."""
    _ce_clip(hub_cache)
    at = hub_cache / "compclip-released" / "ce-clip-b32.sha256"
    at.parent.mkdir()
    record(at)
    capsys.readouterr()  # what making the stand-in's weights logged
    code, _, err = run_main(capsys, "-q", "eval", "--model", "ce-clip-b32", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            swap_att, "--workers", "0", "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {at}: {said}"), err


def test_a_full_disk_at_the_first_load_records_nothing_and_the_next_load_records_the_hash(hub_cache):
    """The record is written whole or not at all: a write the file system refuses (here past `ulimit -f`) is one line,
    and leaves no record for later loads to trip on."""
    import subprocess
    import sys

    file = _ce_clip(hub_cache)
    limited = ("import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               "resource.setrlimit(resource.RLIMIT_FSIZE, (40, 40))\n"
               "from compclip.errors import StorageError\nfrom compclip.models import load_model\n"
               "try:\n    load_model('ce-clip-b32')\nexcept StorageError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", limited], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_CACHE": str(hub_cache)}, timeout=300)
    record = hub_cache / "compclip-released" / "ce-clip-b32.sha256"
    assert done.returncode == 0 and done.stdout.startswith(f"{record}: not written: the file would pass this process's file-size "
                                                           "limit"), done.stdout + done.stderr[-3000:]
    assert sorted(p.name for p in record.parent.iterdir()) == []
    from compclip.models import load_model

    load_model("ce-clip-b32")
    assert record.read_text().split()[0] == sha256_of(file)


def test_what_the_registry_writes_follows_the_umask(hub_cache):
    """A group sharing a cache (umask 002) reads the converted file and the record: neither is safetensors' or mkstemp's
    private 0600."""
    from compclip.models import load_model

    _conclip(_state())
    before = os.umask(0o002)
    try:
        load_model("conclip-b32")
    finally:
        os.umask(before)
    written = [hub_cache / "compclip-released" / "conclip-b32.sha256",
               *(p for p in (hub_cache / "compclip-released" / "conclip-b32").iterdir() if p.suffix == ".safetensors")]
    assert len(written) == 2 and {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o664)}, written


def test_a_folder_of_the_users_own_named_like_a_registry_id_is_loaded_as_that_folder(hub_cache, monkeypatch, tmp_path):
    """`--model negclip-b32` or `./negclip-b32` where a folder of that name is: the user's checkpoint, not the release."""
    from compclip.models import load_model, save_checkpoint

    model, _, _ = load_model("compclip-tiny-clip", init_seed=3)
    save_checkpoint(model, tmp_path / "negclip-b32")
    monkeypatch.chdir(tmp_path)
    for name in ("negclip-b32", "./negclip-b32"):
        loaded, _, _ = load_model(name)
        assert Path(loaded.compclip_spec["model_name"]).name != "ViT-B-32-quickgelu", name
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items()), name


@pytest.mark.parametrize(("name", "missing"), [
    ("openai-clip-b32", "timm/vit_base_patch32_clip_224.openai/open_clip_model.safetensors or open_clip_pytorch_model.bin"),
    ("clic-laion-b32", "nmndeep/CLIC-ViT-B-32-224-CogVLM/open_clip_config.json"),
    ("ce-clip-b32", "le723z/CE_CLIP/CE_CLIP.pt"),
    ("negclip-b32", None),
], ids=["tag", "hub_repository", "hub_file", "hand_download"])
def test_absent_weights_of_each_route_are_one_line_naming_what_where_and_the_offline_command(name, missing, swap_att, tmp_path):
    """Offline, an empty Hugging Face cache: `compclip -q eval --model ID` as a user runs it prints one `error:` line
    (open_clip logged a second one for a tag, and an `hf-hub:` repository's was a raw FileNotFoundError) that names the
    file, the cache it was looked for in, and `--model ID --pretrained FILE`."""
    import subprocess
    import sys

    home = tmp_path / "hf"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}
    done = subprocess.run([sys.executable, "-m", "compclip", "-q", "eval", "--model", name, "--benchmark", "sugarcrepe/swap_att",
                           "--data-root", str(swap_att), "--workers", "0", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=300)
    err = done.stderr
    assert (done.returncode, err.count("\n"), done.stdout) == (2, 1, ""), err[-3000:]
    if missing:
        assert err.startswith(f"error: {name}: {missing} is not in the Hugging Face cache {home / 'hub'}, and HF_HUB_OFFLINE forbids "
                              "downloading it"), err
    else:
        assert err.startswith(f"error: {name}: {home / 'hub' / 'compclip-released' / name / 'negclip.pth'} is not there."), err
    beside = " (open_clip_config.json beside it)" if name == "clic-laion-b32" else ""  # the repository's architecture
    assert err.endswith(f"--model {name} --pretrained FILE{beside}\n"), err


def test_a_tag_entry_and_a_hub_repository_entry_load_a_copy_given_by_pretrained(hub_cache, tmp_path):
    """`--model openai-clip-b32 --pretrained FILE` (refused before: "loads its own weights") and `--model clic-laion-b32
    --pretrained FILE` with the repository's open_clip_config.json beside it load the file's weights, offline, nothing
    in the cache."""
    import open_clip
    from safetensors.torch import save_file

    from compclip.models import load_model

    state = _state()
    tag_copy = tmp_path / "openai-b32.pt"
    torch.save(state, tag_copy)
    repository = tmp_path / "clic"
    repository.mkdir()
    (repository / "open_clip_config.json").write_text(json.dumps({"model_cfg": open_clip.get_model_config("ViT-B-32-quickgelu")}))
    save_file(state, str(repository / "open_clip_model.safetensors"))
    for name, file in (("openai-clip-b32", tag_copy), ("clic-laion-b32", repository / "open_clip_model.safetensors")):
        model, _, _ = load_model(name, str(file))
        loaded = model.state_dict()
        assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items()), name
        assert model.compclip_spec["pretrained"] == str(file), name
    assert list(hub_cache.iterdir()) == []


def test_fetch_list_names_each_absent_file_with_its_url_and_the_exact_path_compclip_finds_it_at(hub_cache, capsys):
    """`compclip models --fetch-list`: every loadable entry whose weights are not here, each file as (id, URL, path); the
    path is huggingface_hub's cache layout (the revision refs/main names, once a repository is partly there) or, for a
    hand download, the folder and the name compclip looks for (DAC's renamed dac-sam-b32.pt). An entry whose stand-in
    is in place is not listed, and a file saved at the path it lists is found."""
    from conftest import HUB_COMMIT

    _ce_clip(hub_cache)
    _negclip(hub_cache)
    plant_hub_repo(hub_cache, "nmndeep/CLIC-ViT-B-32-224-CogVLM", {"open_clip_config.json": b"{}"})  # its weights not yet
    code, out, _ = run_main(capsys, "models", "--fetch-list")
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    listed = {}
    for entry_id, url, path in rows:
        listed.setdefault(entry_id, []).append((url, path))
    loadable = {e.id for e in ENTRIES if e.loads_as is not None}
    assert set(listed) == loadable - {"ce-clip-b32", "negclip-b32"}
    clic = hub_cache / "models--nmndeep--CLIC-ViT-B-32-224-CogVLM" / "snapshots" / HUB_COMMIT / "open_clip_model.safetensors"
    assert listed["clic-laion-b32"] == [("https://huggingface.co/nmndeep/CLIC-ViT-B-32-224-CogVLM/resolve/main/open_clip_model.safetensors",
                                         str(clic))]
    dac = get_released("dac-sam-b32")
    assert listed["dac-sam-b32"] == [(dac.url, str(hub_cache / "compclip-released" / "dac-sam-b32" / "dac-sam-b32.pt"))]
    tag = listed["openai-clip-b32"]
    assert tag == [("https://huggingface.co/timm/vit_base_patch32_clip_224.openai/resolve/main/open_clip_model.safetensors",
                    str(hub_cache / "models--timm--vit_base_patch32_clip_224.openai" / "snapshots" / "<revision>" /
                        "open_clip_model.safetensors"))]
    # saved at the listed paths (a revision of the user's choosing, refs/main naming it), both are found
    from safetensors.torch import save_file

    save_file(_state(), str(clic))
    plant_hub_repo(hub_cache, "timm/vit_base_patch32_clip_224.openai", {"open_clip_model.safetensors": b"weights"})
    code, out, _ = run_main(capsys, "models", "--fetch-list")
    assert {"clic-laion-b32", "openai-clip-b32"}.isdisjoint(line.split("\t")[0] for line in out.splitlines())
