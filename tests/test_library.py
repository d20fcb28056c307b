"""compclip inside the user's own code: the harness on a model in memory, results as a DataFrame, full registries."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from compclip.errors import UsageError
from conftest import run_main, run_tree, shared_data

BENCHMARKS = "sugarcrepe/swap_att,sugarcrepe_pp/swap_att,winoground"


def test_evaluate_in_memory_writes_what_compclip_eval_writes_for_its_checkpoint(swap_root, tmp_path, capsys):
    import compclip
    from compclip.models import load_model, save_checkpoint

    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    records = compclip.evaluate(model, preprocess, tokenizer, BENCHMARKS, data_root=swap_root, out=tmp_path / "memory", workers=0)
    code, _, _ = run_main(capsys, "eval", "--model", tmp_path / "ckpt", "--benchmark", BENCHMARKS, "--out", tmp_path / "cli",
                          "--data-root", swap_root, "--workers", 0, "--device", "cpu")
    assert code == 1  # winoground's files are absent: written incomplete, as the command line says
    files = sorted(p.name for p in (tmp_path / "cli").glob("*.json"))
    assert files == sorted(p.name for p in (tmp_path / "memory").glob("*.json")) and len(files) == 3
    for file in files:
        cli, memory = (json.loads((tmp_path / side / file).read_text()) for side in ("cli", "memory"))
        assert json.dumps(memory["metrics"]) == json.dumps(cli["metrics"]) and memory == records[memory["dataset"]]
        differ = {k for k in cli if cli[k] != memory.get(k)}
        assert differ <= {"model", "weights_sha256", "seconds", "lacks"}, differ  # the name and file, and how long it took
        assert memory["model"] == "CLIP" and memory["weights_sha256"] is None  # in memory: named by its class, no file
    assert records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["n"] == 666

    table = compclip.load_results([tmp_path / "cli", tmp_path / "memory"])
    assert list(table.columns) == ["model", "benchmark", "split", "metric", "value", "n"]
    swap = table[(table.benchmark == "sugarcrepe") & (table.split == "swap_att") & (table.metric == "acc")]  # (a one-split run)
    acc = records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"]
    assert swap.set_index("model")["value"].to_dict() == {"cli": acc, "memory": acc}
    assert swap["n"].tolist() == [666, 666]
    totals = table[(table.benchmark == "sugarcrepe_pp") & (table.split == "")]
    assert set(totals.metric) >= {"swap_itt", "overall_itt"} and totals["n"].isna().all()
    assert set(table[table.benchmark == "winoground"].metric) == set()  # a benchmark that did not run gives no score
    assert len(table) == len(table.drop_duplicates(["model", "benchmark", "split", "metric"]))

    items = compclip.load_items(tmp_path / "memory")  # one row per scored item, beside each result
    assert sorted(p.name for p in (tmp_path / "memory").glob("*.items.parquet")) == ["sugarcrepe-swap_att.items.parquet",
                                                                                     "sugarcrepe_pp-swap_att.items.parquet"]
    sc = items[items.benchmark == "sugarcrepe-swap_att"]
    assert list(sc.columns[:11]) == ["model", "benchmark", "split", "item", "image", "true", "false", "score_true", "score_false",
                                     "correct", "tie"]
    official = json.loads(shared_data("sugarcrepe", "swap_att.json").read_text())
    assert len(sc) == 666 and sc["item"].tolist() == list(official)  # each item by its key in the official file
    assert [official[k]["negative_caption"] for k in sc["item"]] == sc["false"].tolist()
    assert sc["correct"].tolist() == (sc["score_true"] > sc["score_false"]).tolist()  # sugar-crepe's rule, a tie wrong
    assert sc["correct"].mean() == records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"]
    pp = items[items.benchmark == "sugarcrepe_pp-swap_att"]
    itt = [min(s[0], s[1]) > s[2] for s in pp["scores"]]  # both positives above the negative
    assert pp["correct"].tolist() == itt and pp["correct"].mean() == records["sugarcrepe_pp/swap_att"]["metrics"]["swap_att"]["itt"]
    assert pp["score_true"].tolist() == [min(s[0], s[1]) for s in pp["scores"]]  # the weaker positive, the one that decides
    assert pp["true"].tolist() == [t[0] if s[0] <= s[1] else t[1] for t, s in zip(pp["texts"], pp["scores"], strict=True)]


def test_evaluate_takes_a_transformers_model_as_the_user_holds_it(swap_root, tmp_path):
    """A transformers CLIP model (compclip's own export of the tiny model, in memory) through `get_*_features`: the same
    choices as the open_clip model it was converted from, up to float rounding."""
    import compclip
    from compclip.export.hf import convert
    from compclip.models import load_model

    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    hf, _ = convert(model)
    ours = compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, workers=0)
    theirs = compclip.evaluate(hf.eval(), preprocess, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, workers=0)
    assert theirs["sugarcrepe/swap_att"]["model"] == "CLIPModel"
    assert theirs["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"] == pytest.approx(
        ours["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"], abs=2 / 666)
    with pytest.raises(ValueError, match="is not a two-tower model"):
        compclip.evaluate(torch.nn.Linear(2, 2), preprocess, tokenizer, "sugarcrepe", data_root=swap_root)


def test_the_benchmark_registry_is_full_wherever_it_is_imported_from():
    code = "from compclip.eval.base import REGISTRY; print(len(REGISTRY), 'sugarcrepe' in REGISTRY, sorted(REGISTRY)[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.stdout.split() == ["22", "True", "aro_order"], out.stderr[-2000:]


LOOP_METHODS = ("siglip", "clip", "c2lip", "hardneg", "negclip", "ceclip", "svlc", "occlip", "dac", "tripletclip", "conclip",
                "negclip_images", "ceclip_margins", "clic")


def test_loss_modules_in_a_plain_loop_equal_compclip_train_on_one_and_two_processes(tmp_path):
    """Each method's loss module in a user's loop (tests/plain_loop.py: the model's own calls, the module, backward, DDP's
    gradient mean) gives the loss and gradients of compclip's training step on the same batch (tests/dist_grads.py), and
    two gloo processes, each holding half the batch, give those of one (CLIC, whose pairs compclip's step makes from
    its own reader, and CE-CLIP ranking with the thresholds its first call gave, on one and two processes only)."""
    import dist_grads
    import plain_loop
    from compclip.train import DistEnv
    from test_train import assert_same, env_for_children, free_port

    one = {m: plain_loop.step(m) for m in LOOP_METHODS}
    for method in LOOP_METHODS[:-2]:
        terms, grads = dist_grads.compute(DistEnv(), 1, method)
        assert_same(({"loss": sum(terms.values())}, grads), ({"loss": one[method][0]}, one[method][1]))
    out = tmp_path / "two.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(Path(__file__).parent / "plain_loop.py"), str(out), ",".join(LOOP_METHODS)]
    result = run_tree(cmd, env=env_for_children(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    two = torch.load(out, weights_only=True)
    for method in LOOP_METHODS:
        assert_same(({"loss": two[method][0]}, two[method][1]), ({"loss": one[method][0]}, one[method][1]))


def test_a_loss_built_for_one_process_refuses_a_process_group_of_two(tmp_path):
    """Under torchrun without rank and world size, a loss would train each rank on its half: it says so instead."""
    from test_train import env_for_children, free_port

    script = tmp_path / "forgot.py"
    script.write_text("import torch, torch.distributed as dist\nfrom compclip.methods import SigLIPLoss\n"
                      "dist.init_process_group('gloo')\nx = torch.nn.functional.normalize(torch.randn(2, 4), dim=-1)\n"
                      "try:\n    SigLIPLoss()(x, x, torch.tensor(10.0), torch.tensor(-10.0))\n"
                      "except ValueError as e:\n    print(dist.get_rank(), e)\ndist.destroy_process_group()\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()), str(script)]
    result = run_tree(cmd, env=env_for_children(), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SigLIPLoss runs in a process group of 2 ranks but was built for one" in result.stdout


def test_a_part_reading_the_old_gathered_columns_is_an_error_not_a_local_loss():
    from compclip.methods import LossPart, Method

    class OldPart(LossPart):
        name, contrastive = "old", True

        def forward(self, out):
            texts = out.get("all_text_features", out["text_features"])
            return {"old": (out["image_features"] @ texts.T).sum()}

    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match="asked for 'all_text_features': parts see this process's outputs only"):
        Method("old", [OldPart()])({"image_features": x, "text_features": x})


def test_evaluate_records_the_precision_it_scored_at_and_a_split_scored_nothing_is_a_row_without_a_value(swap_root, tmp_path):
    import compclip
    from compclip.models import load_model

    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    records = compclip.evaluate(model, preprocess, tokenizer, "winoground", data_root=swap_root, precision="amp_bf16")
    assert records["winoground"]["precision"] == "amp_bf16" and records["winoground"]["complete"] is False
    # the name given is the folder's label, and a one-split run's rows sit under their benchmark's name
    for name, folder in (("C2LIP", "x"), ("SigLIP", "y")):
        compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, name=name, out=tmp_path / folder)
    named = compclip.load_results([tmp_path / "x", tmp_path / "y"])
    assert set(named["model"]) == {"C2LIP", "SigLIP"} and set(named["benchmark"]) == {"sugarcrepe"}
    assert "swap_att" in set(named["split"]) and set(compclip.load_items([tmp_path / "x"])["model"]) == {"C2LIP"}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "sugarcrepe.json").write_text(json.dumps({"metrics": {"swap_att": {"acc": None, "n": 0}, "add": 0.5}}))
    table = compclip.load_results(tmp_path / "r")
    assert table[["split", "metric"]].values.tolist() == [["swap_att", "acc"], ["", "add"]]
    assert table["value"].isna().tolist() == [True, False] and table["n"].tolist()[0] == 0


# ---- the loss modules refuse what they cannot mean, naming the argument, as a library's user expects --------------------

def _losses():
    from compclip.methods import CLIPLoss, HardNegativeLoss, NegCLIPLoss, SigLIPLoss

    negatives = {"negative_features": torch.randn(2, 8), "negative_image": torch.tensor([0, 3])}
    return {"CLIPLoss": (CLIPLoss(), {}), "SigLIPLoss": (SigLIPLoss(), {"logit_bias": torch.tensor(-10.0)}),
            "NegCLIPLoss": (NegCLIPLoss(), {"negative_features": negatives["negative_features"]}),
            "HardNegativeLoss": (HardNegativeLoss(negatives_as="extra"), negatives)}


@pytest.mark.parametrize("loss", ["CLIPLoss", "SigLIPLoss", "NegCLIPLoss", "HardNegativeLoss"])
def test_a_loss_module_refuses_inputs_it_cannot_mean_naming_the_argument(loss):
    """Mismatched rows (a finite number before), an empty batch (NaN before), another width, features that are not
    (rows, dimension), a tensor on another device: one error each, naming the argument. What it accepts it scores as
    before: 4 pairs give a finite loss, the negatives of other rows or none at all included."""
    module, extra = _losses()[loss]
    torch.manual_seed(0)
    image, text, scale = F.normalize(torch.randn(4, 8), dim=-1), F.normalize(torch.randn(4, 8), dim=-1), torch.tensor(10.0)
    assert torch.isfinite(module(image, text, logit_scale=scale, **extra))
    assert module(image, text, logit_scale=10.0, **extra) == module(image, text, logit_scale=scale, **extra)  # a number too
    cases = [((image, text[:3]), "image_features has 4 rows and text_features 3"),
             ((image[:0], text[:0]), "image_features has no rows"),
             ((image, text[:, :6]), "text_features has dimension 6 and image_features 8"),
             ((image, text[None]), "text_features must be (rows, dimension), not of shape (1, 4, 8)"),
             ((image, text.to("meta")), "text_features is on meta and image_features on cpu")]
    if "negative_features" in extra:
        cases.append(((image, text), "negative_features has dimension 5 and image_features 8", {"negative_features": torch.randn(2, 5)}))
    for args, said, *changed in cases:
        with pytest.raises(UsageError) as refused:
            module(*args, logit_scale=scale, **{**extra, **(changed[0] if changed else {})})
        assert str(refused.value) == f"{loss}: {said}" or str(refused.value).startswith(f"{loss}: {said}:"), str(refused.value)
    with pytest.raises(UsageError, match=f"^{loss}: logit_scale is on meta and image_features on cpu$"):
        module(image, text, logit_scale=scale.to("meta"), **extra)


def test_output_dict_gives_open_clips_key_and_value():
    """`output_dict=True` as open_clip's `ClipLoss` and `SigLipLoss` answer it: `{"contrastive_loss": loss}`, the value
    theirs (on one process; on several, compclip's is the whole batch's on every rank)."""
    import open_clip

    from compclip.methods import CLIPLoss, SigLIPLoss

    torch.manual_seed(0)
    image, text = F.normalize(torch.randn(5, 8), dim=-1), F.normalize(torch.randn(5, 8), dim=-1)
    scale, bias = torch.tensor(10.0), torch.tensor(-10.0)
    ours, theirs = CLIPLoss()(image, text, scale, output_dict=True), open_clip.ClipLoss()(image, text, scale, output_dict=True)
    assert ours.keys() == theirs.keys() == {"contrastive_loss"}
    assert ours["contrastive_loss"] == pytest.approx(float(theirs["contrastive_loss"]), rel=1e-6)
    ours = SigLIPLoss()(image, text, scale, bias, output_dict=True)
    theirs = open_clip.loss.SigLipLoss()(image, text, scale, bias, output_dict=True)
    assert ours.keys() == theirs.keys() == {"contrastive_loss"}
    assert ours["contrastive_loss"] == pytest.approx(float(theirs["contrastive_loss"]), rel=1e-6)


def _losses_with_rows_per_image():
    """CLIC's, C2LIP's concept terms' and OC-CLIP's losses, each with inputs it scores (named as its forward names them)
    and the tensor of a row per image that is not the text (CLIC's positives, the visual tokens)."""
    from compclip.methods import BindingModule, CLICLoss, ConceptLoss, OCCLIPLoss

    torch.manual_seed(0)
    unit = lambda *shape: F.normalize(torch.randn(*shape), dim=-1)  # noqa: E731
    image, scale, owners = unit(4, 8), torch.tensor(10.0), torch.tensor([0, 0, 1, 2, 3, 3])
    return {
        "CLICLoss": (CLICLoss(), {"image_features": image, "positive_features": unit(4, 2, 8), "negative_features": unit(4, 8),
                                  "negative_image": torch.arange(4), "logit_scale": scale}, "positive_features"),
        "ConceptLoss": (ConceptLoss(), {"image_features": image, "concept_features": unit(6, 8), "visual_tokens": unit(4, 5, 8),
                                        "concept_image": owners, "logit_scale": scale, "logit_bias": torch.tensor(-10.0)}, "visual_tokens"),
        "OCCLIPLoss": (OCCLIPLoss(), {"binding": BindingModule(8, 1), "visual_tokens": unit(4, 5, 8), "image_features": image,
                                      "node_features": unit(6, 8), "node_image": owners, "relation_features": unit(2, 8),
                                      "relation_image": torch.tensor([0, 3]),
                                      "relation_ends": torch.tensor([[0, 1, 1, 0, 0, 1], [0, 1, 1, 0, 1, 0]]), "logit_scale": scale},
                       "visual_tokens"),
    }


@pytest.mark.parametrize("loss", ["CLICLoss", "ConceptLoss", "OCCLIPLoss"])
def test_a_loss_with_a_row_per_image_beyond_the_text_refuses_what_does_not_pair(loss):
    """The same refusals for the losses whose inputs are not an (image, text) pair: their own per-image tensor with
    another number of rows, an empty batch, a feature of another width, a tensor on another device."""
    module, inputs, own = _losses_with_rows_per_image()[loss]
    assert all(torch.isfinite(v) for v in module(**inputs).values())
    feature = next(k for k in inputs if k.endswith("_features") and k != "image_features" and inputs[k].ndim == 2)
    cases = [({own: inputs[own][:3]}, f"image_features has 4 rows and {own} 3"),
             ({"image_features": inputs["image_features"][:0], own: inputs[own][:0]}, "image_features has no rows"),
             ({feature: inputs[feature][:, :5]}, f"{feature} has dimension 5 and image_features 8"),
             ({own: inputs[own].to("meta")}, f"{own} is on meta and image_features on cpu")]
    for changed, said in cases:
        with pytest.raises(UsageError) as refused:
            module(**{**inputs, **changed})
        assert str(refused.value) == f"{loss}: {said}" or str(refused.value).startswith(f"{loss}: {said}:"), str(refused.value)



def _every_loss():
    """Every loss module with inputs it scores (4 images, width 8), named as its forward names them, and its argument
    with a row per image that pairs with the images (the text, CLIC's positives, the visual tokens)."""
    from compclip.methods import C2LIPLoss, CLIPLoss, HardNegativeLoss, NegCLIPLoss, SigLIPLoss

    torch.manual_seed(0)
    unit = lambda *shape: F.normalize(torch.randn(*shape), dim=-1)  # noqa: E731
    pair = {"image_features": unit(4, 8), "text_features": unit(4, 8), "logit_scale": torch.tensor(10.0)}
    bias = {"logit_bias": torch.tensor(-10.0)}
    negatives = {"negative_features": unit(3, 8), "negative_image": torch.tensor([0, 3, 3]),
                 "negative_draw": torch.tensor([0.2, 0.6, 0.6])}
    concepts = {"concept_features": unit(6, 8), "visual_tokens": unit(4, 5, 8), "concept_image": torch.tensor([0, 0, 1, 2, 3, 3])}
    return {"CLIPLoss": (CLIPLoss(), pair, "text_features"), "SigLIPLoss": (SigLIPLoss(), pair | bias, "text_features"),
            "NegCLIPLoss": (NegCLIPLoss(), pair | {"negative_features": negatives["negative_features"]}, "text_features"),
            "HardNegativeLoss": (HardNegativeLoss(), pair | negatives, "text_features"),
            "C2LIPLoss": (C2LIPLoss(), pair | bias | concepts, "text_features"), **_losses_with_rows_per_image()}


EVERY_LOSS = ["CLIPLoss", "SigLIPLoss", "NegCLIPLoss", "HardNegativeLoss", "C2LIPLoss", "CLICLoss", "ConceptLoss", "OCCLIPLoss"]


def _refused(loss, module, inputs, said):
    with pytest.raises(UsageError) as refused:
        module(**inputs)
    assert str(refused.value) == f"{loss}: {said}" or str(refused.value).startswith(f"{loss}: {said}:"), str(refused.value)


def _values(terms):
    return [float(t.detach()) for t in (terms.values() if isinstance(terms, dict) else [terms])]


@pytest.mark.parametrize("loss", EVERY_LOSS)
def test_every_loss_module_refuses_a_feature_of_one_dimension_and_more_rows_than_images(loss):
    """A feature vector without its rows (x[0] for x), and a row per image beyond the batch's images (a fifth caption
    to four images), are one error naming the argument: the first raised an IndexError or scored a broadcast, the
    second cross-entropy's own error."""
    module, inputs, own = _every_loss()[loss]
    assert all(math.isfinite(v) for v in _values(module(**inputs)))
    for name in [k for k, v in inputs.items() if k.endswith("_features") and v.ndim == 2]:
        _refused(loss, module, {**inputs, name: inputs[name][0]}, f"{name} must be (rows, dimension), not of shape (8,)")
    _refused(loss, module, {**inputs, own: torch.cat([inputs[own], inputs[own][:1]])}, f"image_features has 4 rows and {own} 5")


@pytest.mark.parametrize("loss", EVERY_LOSS)
def test_every_loss_module_refuses_an_index_outside_its_images_and_features_that_are_not_floats(loss):
    """Integer features (a finite loss before), an image index past the batch or negative (-1 was the last image, 4 a
    concept of no image), a float index and one index short: one error naming the argument, its value and the range.
    The last image (3) is a valid index, and int32 indices score as int64 ones."""
    module, inputs, _ = _every_loss()[loss]
    for name in [k for k in inputs if k.endswith("_features")]:
        _refused(loss, module, {**inputs, name: (inputs[name] * 100).long()},
                 f"{name} is of dtype torch.int64: features are floating point, as the towers give them")
    indices = [k for k in inputs if k.endswith("_image")]
    assert bool(indices) == (loss in ("HardNegativeLoss", "C2LIPLoss", "CLICLoss", "ConceptLoss", "OCCLIPLoss"))
    for name in indices:
        assert int(inputs[name].max()) == 3
        rows = inputs[name].shape[0]
        as_int = _values(module(**{**inputs, name: inputs[name].int()}))
        assert as_int == pytest.approx(_values(module(**inputs)), rel=1e-6)
        for value in (4, 100, -1):
            index = inputs[name].clone()
            index[-1] = value
            _refused(loss, module, {**inputs, name: index},
                     f"{name} holds {value} and image_features has 4 rows: indices 0 to 3 of this rank's images")
        _refused(loss, module, {**inputs, name: inputs[name].float()},
                 f"{name} is of dtype torch.float32: indices are torch.long (or torch.int)")
        of = name.replace("_image", "_features")
        _refused(loss, module, {**inputs, name: inputs[name][:-1]},
                 f"{name} has shape ({rows - 1},) and {of} {rows} rows: one index to a row")
    if loss == "OCCLIPLoss":  # ends index the nodes of their relation's image: image 3 owns nodes 4 and 5, its 0 and 1
        for value in (2, -1):
            ends = inputs["relation_ends"].clone()
            ends[1, 0] = value
            _refused(loss, module, {**inputs, "relation_ends": ends},
                     f"relation_ends holds {value} where its relation's image has 2 node_features rows: indices 0 to 1 among them")

def test_evaluate_refuses_a_model_without_weights_or_with_anothers_preprocess(swap_root):
    """A model built on the meta device, and the preprocess of another model's size: one error each, before any image
    is read, where both ended in a traceback."""
    import open_clip

    import compclip

    model, preprocess, tokenizer = compclip.load_model("compclip-tiny-clip")
    empty = compclip.load_model("compclip-tiny-clip")[0].to("meta")  # as `torch.device("meta")` or accelerate's init builds one
    with pytest.raises(UsageError, match=r"^the model's weights are on the meta device"):
        compclip.evaluate(empty, preprocess, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, workers=0)
    from compclip.eval.run import refuse_unusable_model

    refuse_unusable_model(model, preprocess)  # its own preprocess passes
    wide = open_clip.image_transform(224, is_train=False)
    with pytest.raises(UsageError, match=r"^preprocess makes 224x224 images and the model's vision tower takes 64x64: "):
        compclip.evaluate(model, wide, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, workers=0)


def test_evaluate_takes_its_benchmarks_as_a_list_or_comma_joined(swap_root, tmp_path):
    """`benchmarks=["sugarcrepe/swap_att"]`, as a notebook writes a list of names, ended in "'list' object has no
    attribute 'split'": a list scores what its names comma-joined score, result for result; a name that is no text is
    one error naming it."""
    import compclip

    model, preprocess, tokenizer = compclip.load_model("compclip-tiny-clip")
    listed = compclip.evaluate(model, preprocess, tokenizer, ["sugarcrepe/swap_att", "winoground"], data_root=swap_root,
                               out=tmp_path / "listed", workers=0)
    joined = compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att,winoground", data_root=swap_root, workers=0)
    assert list(listed) == list(joined) == ["sugarcrepe/swap_att", "winoground"]
    for label, record in joined.items():
        assert listed[label]["metrics"] == record["metrics"] and listed[label]["complete"] == record["complete"]
    assert listed["sugarcrepe/swap_att"]["metrics"]["swap_att"]["n"] == 666
    assert json.loads((tmp_path / "listed" / "sugarcrepe-swap_att.json").read_text())["metrics"] == joined["sugarcrepe/swap_att"]["metrics"]
    with pytest.raises(UsageError, match=r"^benchmarks: 7 is not a benchmark's name \(NAME or NAME/SPLIT\)"):
        compclip.evaluate(model, preprocess, tokenizer, ["sugarcrepe/swap_att", 7], data_root=swap_root, workers=0)
