"""Published recipes: every setting a train option with its source, applied by `train --recipe` with the flags given
beside it winning, recorded in the run's config.json; and the trainer features the recipes need (epochs, a global batch
reached by accumulation, a warm-up start and a cosine floor)."""
import dataclasses
import json
import math
import os
import re

import pytest
import torch

from compclip.errors import UsageError
from compclip.methods import build_method, method_options
from compclip.recipes import get_recipe, list_recipes
from compclip.train import TrainConfig, Trainer
from conftest import run_main
from test_train import make_dataset

PAPERS = {  # what each source says, typed in again from the papers and the authors' released code (the recipes must agree)
    "c2lip-cc3m": {"model": "ViT-B-16-SigLIP", "pretrained": "webli", "lr": 1e-5, "global_batch_size": 768, "epochs": 5,
                   "method_options": {"lambda_npc": 1.0, "lambda_xac": 0.01},
                   # scripts/train_full_model_wds_data.sh
                   "optimizer": "adamw", "weight_decay": 0.1, "betas": [0.9, 0.98], "eps": 1e-6, "warmup": 50, "batch_size": 96,
                   "precision": "bf16", "seed": 42, "dataset_resampled": True},
    "clic-coco": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "optimizer": "adamw", "betas": [0.9, 0.98], "eps": 1e-8,
                  "weight_decay": 0.1, "schedule": "cosine", "warmup_fraction": 0.2, "warmup_lr": 1e-7, "lr": 1e-6, "min_lr": 1e-8,
                  "global_batch_size": 800, "batch_size": 200, "epochs": 5, "precision": "amp",
                  "method_options": {"train_image": False, "lambda_cont": 0.5, "lambda_neg": 0.5, "lambda_uni": 1.0}},
    "clic-laion": {"model": "ViT-B-32-quickgelu", "epochs": 1, "global_batch_size": 800, "lr": 1e-6, "precision": "amp"},
    # NegCLIP: the ARO README's command on the vinid/open_clip fork, and the fork's params.py defaults
    "negclip-coco": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 256, "batch_size": 256, "lr": 1e-6,
                     "epochs": 5, "warmup": 50, "weight_decay": 0.2, "betas": [0.9, 0.98], "eps": 1e-6, "precision": "amp",
                     "field_keys": {"neighbours": "neg_image"}, "method_options": {"hard_images": "neighbours"}},
    # CE-CLIP: the released scripts/run_multiple_nodes.sh (4 processes of 378) and src/training/params.py
    "ceclip-coco": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 1512, "batch_size": 378, "lr": 5e-6,
                    "epochs": 10, "warmup": 50, "weight_decay": 0.1, "betas": [0.9, 0.98], "eps": 1e-6, "precision": "amp", "seed": 42,
                    "schedule": "cosine", "method_options": {"cmr_weight": 0.2, "imc_weight": 0.3, "upper_bound": 10.0}},
    # SVLC-R: the released README's RB command (one process) and src/training/params.py's defaults for a ViT
    "svlc-cc3m": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 128, "batch_size": 128, "lr": 5e-6,
                  "epochs": 5, "warmup": 10000, "weight_decay": 0.1, "betas": [0.9, 0.98], "eps": 1e-6, "precision": "amp", "seed": 0,
                  "schedule": "cosine", "method_options": {"negatives": 1, "negative_weight": 1.0, "negatives_in_contrastive": True,
                                                           "negative_types": "color,action,material,size,state",
                                                           "replace": "substring"}},
    # SVLC-R+L: the released README's RB+LLM command, the rest as SVLC-R's
    "svlc-rl-cc3m": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 128, "lr": 5e-6, "epochs": 5,
                     "method_options": {"llm_negatives": True, "negatives": 1, "negative_types": "color,action,material,size,state"}},
    # DAC: the released README's LLM-density command (one process of 32) and src/training/params.py
    "dac-llm-cc3m": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 32, "batch_size": 32, "lr": 5e-6,
                     "epochs": 5, "warmup": 10000, "weight_decay": 0.1, "betas": [0.9, 0.98], "eps": 1e-6, "precision": "amp", "seed": 0,
                     "method_options": {"mil_batch": 10, "dense_negatives": True, "caption_negatives": True, "neg_weight": 1.0}},
    # TripletCLIP: the released src/openclip (parse_args.py, scripts/sample_train.sh, data.py); it trains from random weights
    "tripletclip-hq": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 1024, "batch_size": 1024,
                       "epochs": 10, "warmup": 1000, "weight_decay": 0.5, "betas": [0.9, 0.999], "eps": 1e-8, "precision": "bf16",
                       "seed": 42, "schedule": "cosine", "optimizer": "adamw", "dataset_resampled": True, "train_num_samples": 1_000_000,
                       "field_keys": {"negative_image": "neg_image", "negative_caption": "neg_caption"},
                       "method_options": {"negative_weight": 1.0, "negative_columns": True}},
    # CoN-CLIP: the released src/training_utils/helpers.py's setup_args, src/run_finetuning.sh, conclip_fine_tuning.py
    "conclip-ccneg": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "global_batch_size": 200, "batch_size": 200, "lr": 1e-6,
                      "epochs": 5, "warmup": 50, "weight_decay": 0.2, "betas": [0.9, 0.999], "eps": 1e-8, "precision": "amp",
                      "schedule": "cosine", "optimizer": "adamw", "shuffle": 0,
                      "method_options": {"distractor_images": True, "lock_image_encoder": True}},
    # Rösch et al. §3.2, its transformers v4.30 Trainer: AdamW (decoupled decay), gradients clipped at norm 1.0
    "hardneg-color": {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "optimizer": "adamw", "weight_decay": 0.1,
                      "grad_clip_norm": 1.0, "lr": 5e-6,
                      "schedule": "const", "warmup": 0, "global_batch_size": 64, "epochs": 3, "precision": "amp",
                      "method_options": {"negative_classes": "color", "negatives_as": "replace", "directions": "sum", "negatives": 1}},
    "hardneg-object": {"model": "ViT-B-32-quickgelu", "optimizer": "adamw", "grad_clip_norm": 1.0, "lr": 5e-6, "epochs": 3,
                       "precision": "amp",
                       "method_options": {"negative_classes": "object", "negatives_as": "replace", "directions": "sum", "negatives": 1}},
    "hardneg-location": {"model": "ViT-B-32-quickgelu", "optimizer": "adamw", "grad_clip_norm": 1.0, "lr": 5e-6, "epochs": 3,
                         "precision": "amp",
                         "method_options": {"negative_classes": "location", "negatives_as": "replace", "directions": "sum",
                                            "negatives": 1}},
    "hardneg-size": {"model": "ViT-B-32-quickgelu", "optimizer": "adamw", "grad_clip_norm": 1.0, "lr": 5e-6, "global_batch_size": 64,
                     "epochs": 3, "precision": "amp",
                     "method_options": {"negative_classes": "size", "negatives_as": "replace", "directions": "sum", "negatives": 1}},
    # OC-CLIP §4.2
    "occlip-coco": {"model": "ViT-B-16", "global_batch_size": 128, "epochs": 100, "lr": 2e-4, "method_options": {"module_lr": 2e-4}},
    "occlip-coco-openclip-ft": {"method": "clip", "model": "ViT-B-16", "global_batch_size": 256, "lr": 4e-6, "epochs": 20},
}
# Each (model, pretrained) of the recipes: the architecture whose activation the weights were trained with
RECIPE_WEIGHTS = {("ViT-B-16-SigLIP", "webli"), ("ViT-B-32-quickgelu", "openai"), ("ViT-B-16", "laion400m_e32")}


def test_every_recipe_is_train_options_each_cited_or_marked_compclips_choice(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("image,caption\n")
    shard = tmp_path / "d-000.tar"  # a recipe that draws shards with replacement (C2LIP's) names shards
    shard.write_bytes(bytes(1024))
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert {"c2lip-cc3m", "clic-coco", "clic-laion", "negclip-coco", "occlip-coco", "occlip-coco-openclip-ft"} <= set(list_recipes())
    assert {f"hardneg-{c}" for c in ("color", "object", "location", "size")} <= set(list_recipes())
    for name in list_recipes():
        recipe = get_recipe(name)
        assert set(recipe.settings) <= fields, name
        assert set(recipe.cited) | set(recipe.choices) == set(recipe.setting_keys()), name
        assert not set(recipe.cited) & set(recipe.choices), name
        assert all(recipe.cited.values()) and all(recipe.choices.values()), name
        declared = {f.name for f in dataclasses.fields(method_options(recipe.settings["method"]))}
        assert set(recipe.settings.get("method_options", {})) <= declared, name
        build_method(recipe.settings["method"], **recipe.settings.get("method_options", {}))  # every option parses
        own = "train_num_samples" in recipe.settings  # an epoch's samples the recipe gives itself (TripletCLIP's 1,000,000)
        resampled = ({"train_data": str(shard), **({} if own else {"train_num_samples": 100})}
                     if recipe.settings.get("dataset_resampled") else {})
        cfg = TrainConfig.from_given({"recipe": name, "train_data": str(data), "out": str(tmp_path / name), **resampled})
        cfg.validate()
        assert cfg.recipe == name and not recipe.overrides(dataclasses.asdict(cfg))
    for name, paper in PAPERS.items():
        settings = get_recipe(name).settings
        for key, value in paper.items():
            if key == "method_options":
                assert {k: settings[key][k] for k in value} == value, name
            else:
                assert settings[key] == value, (name, key)


def test_a_broken_recipe_file_is_refused_naming_what_lacks_a_source():
    from compclip.recipes import Recipe, _check

    recipe = Recipe(name="x", paper="p", citation="c", data="d", numbers={}, settings={"lr": 1.0, "method_options": {"a": 1}},
                    cited={"lr": "§1"}, choices={}, departures=[])
    with pytest.raises(ValueError, match=r"x.json: settings neither cited nor marked a choice: method_options.a"):
        _check(recipe, "x.json")
    with pytest.raises(ValueError, match="both cited and marked a choice: lr"):
        _check(dataclasses.replace(recipe, cited={"lr": "§1", "method_options.a": "§2"}, choices={"lr": "why"}), "x.json")
    with pytest.raises(ValueError, match=r"x\.json: departures must be a list of sentences"):
        _check(dataclasses.replace(recipe, cited={"lr": "§1", "method_options.a": "§2"}, departures="none"), "x.json")


def test_compclip_recipes_lists_every_recipe_with_its_citation_and_choices(capsys):
    code, out, _ = run_main(capsys, "recipes")
    assert code == 0
    for name in list_recipes():
        assert f"{name}: {get_recipe(name).citation}" in out
    assert "  method_options.lambda_xac=0.01  (§4.1: λ_xac = 0.01)" in out
    assert "  precision=bf16  (the script's --precision bf16: open_clip's bf16" in out
    assert "  method_options.layer=-2  (compclip's choice: §4.2: patches from earlier layers" in out
    occlip = out.split("occlip-coco: ")[1].split("occlip-coco-openclip-ft: ")[0]  # each recipe's departures under its own name
    assert "  departs: no attention-layer component: the paper's full model has one (its ablation: Rel 80.5 -> 77.6" in occlip
    assert "  departs: scene graphs come from spaCy" in occlip and "  departs: the contrastive loss takes tau * S(x, G)" in occlip
    assert "  departs: 100 epochs are counted over the records of the file you give" in occlip
    negclip = out.split("negclip-coco: ")[1].split("occlip-coco: ")[0]
    assert "  departs: a caption's swap is compclip's, fixed by (seed, caption)" in negclip
    assert "where NegCLIP swaps six kinds (CLIC Appendix D.1" in negclip and "no hard-negative images" not in negclip
    assert all(get_recipe(n).departures for n in list_recipes())  # every recipe states at least one
    code, _, err = run_main(capsys, "train", "--recipe", "c2lip-cc4m", "--train-data", "x.csv", "--out", "o")
    assert code == 2 and err.startswith("error: --recipe c2lip-cc4m: no such recipe (did you mean c2lip-cc3m?)")


def test_compclip_recipes_name_shows_that_recipe_alone_and_a_mistyped_one_is_one_line(capsys):
    code, out, _ = run_main(capsys, "recipes", "negclip-coco")
    assert code == 0 and out.startswith(f"negclip-coco: {get_recipe('negclip-coco').citation}\n")
    assert [line.split(": ")[0] for line in out.splitlines() if not line.startswith(" ")] == ["negclip-coco"]
    _, whole, _ = run_main(capsys, "recipes")
    assert out in whole  # the same lines as in the full listing
    code, _, err = run_main(capsys, "recipes", "c2lip-cc4m")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: --recipe c2lip-cc4m: no such recipe (did you mean c2lip-cc3m?)")


def test_train_with_the_c2lip_recipe_runs_its_optimiser_schedule_and_loss_weights(tmp_path, capsys):
    """`compclip train --recipe c2lip-cc3m` with a tiny model and two steps: what the trainer builds is the paper's (AdamW
    of the authors' script, lr 1e-5, β, ε, weight decay, warm-up then cosine, λ_npc 1, λ_xac 0.01, open_clip's bf16, seed 42),
    the flags given win (--no-dataset-resampled on a CSV), config.json records the recipe and each override, and the same
    command resumes (nothing left to do)."""
    data = make_dataset(tmp_path, n=16)
    assert run_main(capsys, "-q", "concepts", data, "--out", tmp_path / "store", "--what", "noun-phrases")[0] == 0
    args = ["-q", "train", "--recipe", "c2lip-cc3m", "--model", "compclip-tiny-siglip", "--train-data", data, "--concepts",
            tmp_path / "store", "--out", tmp_path / "run", "--steps", "2", "--batch-size", "8", "--global-batch-size", "16",
            "--workers", "0", "--no-dataset-resampled"]
    code, _, err = run_main(capsys, *args)
    assert code == 0, err
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["recipe"] == "c2lip-cc3m" and record["recipe_record"]["citation"] == get_recipe("c2lip-cc3m").citation
    assert record["recipe_record"]["overrides"] == {
        "model": {"recipe": "ViT-B-16-SigLIP", "run": "compclip-tiny-siglip"}, "pretrained": {"recipe": "webli", "run": None},
        "global_batch_size": {"recipe": 768, "run": 16}, "batch_size": {"recipe": 96, "run": 8}, "epochs": {"recipe": 5, "run": None},
        "dataset_resampled": {"recipe": True, "run": False}}
    assert record["accum_freq"] == 2 and record["steps"] == 2 and record["precision"] == "bf16" and record["seed"] == 42
    assert record["method_options"] == {"lambda_npc": 1.0, "lambda_xac": 0.01}
    logged = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2] and set(logged[0]) >= {"siglip", "npc", "xac"}
    assert run_main(capsys, *args)[0] == 0  # resumed: the same options, resolved the same way

    cfg = TrainConfig.from_given({"recipe": "c2lip-cc3m", "model": "compclip-tiny-siglip", "train_data": str(data),
                                  "concepts": str(tmp_path / "store"), "out": str(tmp_path / "other"), "steps": 200,
                                  "batch_size": 8, "workers": 0, "dataset_resampled": False, "accept_accum": True})
    trainer = Trainer(cfg)
    opt = trainer.optimizer
    assert type(opt) is torch.optim.AdamW and trainer.cfg.accum_freq == 96  # 768 images a step from 8 per micro-batch
    decayed = [g for g in opt.param_groups if g["weight_decay"]]
    assert decayed and all(g["weight_decay"] == 0.1 and g["betas"] == (0.9, 0.98) and g["eps"] == 1e-6 for g in decayed)
    rates = []
    for _ in range(200):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradients: nothing moves, and torch sees the order it expects
        trainer.scheduler.step()
    assert rates[0] == pytest.approx(1e-5 / 50) and rates[49] == pytest.approx(1e-5)  # 50 warm-up steps to the peak
    assert rates[125] == pytest.approx(1e-5 * 0.5 * (1 + math.cos(math.pi * 75 / 150)))
    part = trainer.method.parts[-1]
    assert (part.lambda_npc, part.lambda_xac) == (1.0, 0.01)


def test_a_flag_beside_a_recipe_replaces_the_recipes_way_of_saying_the_same_thing(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("image,caption\n")
    base = {"recipe": "clic-coco", "train_data": str(data), "out": str(tmp_path / "o")}
    cfg = TrainConfig.from_given({**base, "steps": 10, "accum_freq": 2, "warmup": 1, "method_options": {"lambda_uni": 2.0}})
    assert (cfg.epochs, cfg.global_batch_size, cfg.warmup_fraction) == (None, None, 0.0)
    assert cfg.method_options == {"train_image": False, "lambda_cont": 0.5, "lambda_neg": 0.5, "lambda_uni": 2.0}
    with pytest.raises(UsageError, match="give --steps or --epochs, not both"):
        TrainConfig.from_given({**base, "steps": 10, "epochs": 1})
    code, _, err = run_main(capsys, "train", "--method", "clip", "--model", "m", "--train-data", data, "--out", tmp_path / "o",
                            "--accum-freq", "2", "--global-batch-size", "64")
    assert code == 2 and err == "error: give --accum-freq or --global-batch-size, not both\n"
    code, _, err = run_main(capsys, "train", "--train-data", data, "--out", tmp_path / "o")
    assert code == 2 and err.startswith("error: --method is required: give it, or a --recipe that sets it")


def test_epochs_and_a_global_batch_resolve_to_steps_and_accumulation(tmp_path):
    from compclip.data import WebDatasetReader

    data = make_dataset(tmp_path, n=20)

    def config(**changes):
        return TrainConfig(**{"method": "clip", "model": "compclip-tiny-clip", "train_data": str(data), "out": str(tmp_path / "o"),
                              "batch_size": 4, "epochs": 3, "workers": 0, **changes})

    given = config(global_batch_size=16, warmup_fraction=0.25)
    cfg = given.resolved(2, lambda: 20)  # two processes: 4 × 2 × 2 micro-batches = 16 images a step
    assert (cfg.accum_freq, cfg.steps, cfg.warmup) == (2, math.ceil(3 * 20 / 16), 1)
    assert (given.accum_freq, given.steps, given.warmup) == (1, 1000, 0)  # the options given stay as given
    assert config(train_data=os.path.relpath(data)).resolved(1, lambda: 20).train_data == str(data.resolve())  # a path made absolute
    with pytest.raises(UsageError, match=r"--global-batch-size 16 is not a multiple of --batch-size 4 × 3 process\(es\) = 12"):
        config(global_batch_size=16).resolved(3, lambda: 20)
    # the trainer counts the CSV's records (open_clip's num_samples) unless --train-num-samples says otherwise
    assert Trainer(config()).cfg.steps == math.ceil(3 * 20 / 4)
    assert Trainer(config(train_num_samples=8, out=str(tmp_path / "p"))).cfg.steps == 6
    with pytest.raises(UsageError, match="shards do not say how many samples they hold; give --train-num-samples"):
        config().resolved(1, WebDatasetReader(str(tmp_path / "s-{0..1}.tar")).num_records)


def test_a_recipes_global_batch_past_16_micro_batches_is_refused_unless_asked_for_and_said_at_the_start(tmp_path, capsys):
    """occlip-coco-openclip-ft fixes open_clip's global batch of 256: at --batch-size 8 that is 256 / 8 = 32 micro-batches
    a step, twice the 16 allowed, refused before a folder is written in one line naming the numbers and the ways on
    (16 micro-batches of 8 are 128 images). --accept-accum trains it, saying its global batch before the first step, on
    stderr and in train.log; the paper's 256 given as --global-batch-size, and --accum-freq 20 given beside the recipe,
    are asked for and not refused; 16 micro-batches of 16, the recipe's own batch, are within the limit."""
    data = make_dataset(tmp_path, n=16)
    given = ["train", "--recipe", "occlip-coco-openclip-ft", "--model", "compclip-tiny-clip", "--train-data", data, "--steps", "1",
             "--workers", "0", "--batch-size", "8"]
    code, _, err = run_main(capsys, "-q", *given, "--out", tmp_path / "refused")
    assert (code, err) == (2, "error: --recipe occlip-coco-openclip-ft: global batch 256 = 8 per rank × 32 micro-batches × 1 rank: "
                              "more than 16 micro-batches, each step 32 forward and backward passes before its update; keep the "
                              "paper's batch knowingly with --global-batch-size 256 (or --accept-accum), or choose a smaller one "
                              "(--global-batch-size 128: 16 micro-batches) or a larger --batch-size\n")
    assert not (tmp_path / "refused").exists()

    code, _, err = run_main(capsys, *given, "--out", tmp_path / "accepted", "--accept-accum")
    assert code == 0, err[-3000:]
    said = "global batch 256 = 8 per rank × 32 micro-batches × 1 rank"
    for where in (err, (tmp_path / "accepted" / "train.log").read_text()):
        lines = where.splitlines()
        first_step = next(i for i, line in enumerate(lines) if "Train Epoch: " in line)
        assert [line.endswith(f"compclip.train: {said}") for line in lines[:first_step]].count(True) == 1, where
    assert json.loads((tmp_path / "accepted" / "config.json").read_text())["accum_freq"] == 32

    def micro_batches(**options):
        cfg = TrainConfig.from_given({"recipe": "occlip-coco-openclip-ft", "model": "compclip-tiny-clip", "train_data": str(data),
                                      "out": str(tmp_path / "built"), "workers": 0, **options})
        return Trainer(cfg).cfg.accum_freq

    assert micro_batches(batch_size=8, global_batch_size=256) == 32
    assert micro_batches(batch_size=8, accum_freq=20) == 20
    assert micro_batches(batch_size=16) == 16
    with pytest.raises(UsageError, match=r"global batch 256 = 4 per rank × 64 micro-batches × 1 rank: more than 16"):
        micro_batches(batch_size=4)


def test_the_schedule_starts_at_the_warmup_rate_and_ends_at_the_floor(tmp_path):
    """CLIC's D.1: 20 % linear warm-up from 1e-7 to the peak 1e-6, then cosine down to 1e-8; the method's own modules'
    rates scale alike. Read from the real scheduler against the formula written out."""
    data = make_dataset(tmp_path, n=8)
    cfg = TrainConfig(method="clip", model="compclip-tiny-clip", train_data=str(data), out=str(tmp_path / "o"), steps=10,
                      warmup_fraction=0.2, warmup_lr=1e-7, lr=1e-6, min_lr=1e-8, workers=0, batch_size=4)
    trainer = Trainer(cfg)
    assert trainer.cfg.warmup == 2
    rates = []
    for _ in range(10):
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        trainer.optimizer.step()
        trainer.scheduler.step()
    rates.append(trainer.optimizer.param_groups[0]["lr"])
    expected = [1e-7 + (1e-6 - 1e-7) * (s + 1) / 2 for s in range(2)]
    expected += [1e-8 + (1e-6 - 1e-8) * 0.5 * (1 + math.cos(math.pi * (s - 2) / 8)) for s in range(2, 11)]
    assert rates == pytest.approx(expected, rel=1e-9)
    assert rates[-1] == pytest.approx(1e-8)
    with pytest.raises(UsageError, match="must not exceed --lr"):
        dataclasses.replace(cfg, min_lr=1e-5).validate()


def result_folder(root, name, benchmarks, options=None):
    """A results folder as `compclip eval` writes it: one <benchmark>.json each, metrics as fractions, each benchmark's
    official tie rule and its options' defaults (or `options[benchmark]`) recorded."""
    import dataclasses

    from compclip.eval import REGISTRY

    folder = root / name
    folder.mkdir()
    for bench, metrics in benchmarks.items():
        made = {**dataclasses.asdict(REGISTRY[bench].Options()), **(options or {}).get(bench, {})}
        record = {"benchmark": bench, "metrics": metrics, "complete": True, "ties": REGISTRY[bench].ties, "options": made}
        (folder / f"{bench}.json").write_text(json.dumps(record))
    return folder


def test_report_sets_results_beside_the_papers_numbers_and_names_what_was_not_run(tmp_path, capsys):
    """`compclip report --paper c2lip`: each of Table 2's and Table 5's columns of the C2LIP row, the user's value (the
    family means of SugarCrepe, the mean of both retrieval directions) and the difference; the columns no folder has."""
    from compclip.eval.report import list_papers, paper_numbers

    assert list_papers() == ["c2lip", "clic", "hardneg", "occlip"]
    for name in list_papers():  # every value is a column the file defines, every column a benchmark's metric paths
        numbers = paper_numbers(name)
        assert numbers["default_model"] in {r["model"] for r in numbers["rows"]}
        assert all(set(r["values"]) <= set(numbers["columns"]) for r in numbers["rows"])
    ours = result_folder(tmp_path, "ours", {
        "sugarcrepe": {"add": 0.9, "replace": 0.85, "swap": 0.7, "swap_att": {"acc": 0.75, "n": 666}},
        "sugarcrepe_pp": {"swap_itt": 0.5, "swap_tot": 0.4},
        "retrieval": {"flickr30k": {"image_retrieval_recall@5": 0.9, "text_retrieval_recall@5": 0.96,
                                    "layout": "flickr30k_test_karpathy.txt"}},
    })
    base = result_folder(tmp_path, "base", {"sugarcrepe": {"add": 0.8, "replace": 0.8, "swap": 0.6}})
    code, out, err = run_main(capsys, "report", ours, base, "--out", tmp_path / "report", "--paper", "c2lip")
    assert code == 0, err
    frame = __import__("pandas").read_csv(tmp_path / "report" / "paper.csv", index_col=0)
    assert frame.loc["SC add", "paper"] == 94.2 and frame.loc["SC add", "ours"] == pytest.approx(90.0)
    assert frame.loc["SC add", "ours − paper"] == pytest.approx(-4.2) and frame.loc["SC add", "base − paper"] == pytest.approx(-14.2)
    assert frame.loc["SC swap att", "paper"] == 78.8 and frame.loc["SC swap att", "table"] == "Table 5"  # the row's Table 5 value
    assert frame.loc["SC swap att", "ours"] == pytest.approx(75.0)
    assert frame.loc["Flickr30k R@5", "ours"] == pytest.approx(93.0) and frame.loc["Flickr30k R@5", "ours − paper"] == pytest.approx(-4.0)
    assert "| SC add | Table 2 | 94.2 | 90.0 | -4.2 | 80.0 | -14.2 |" in out
    assert "Not run (no result has them): SC++ replace ITT, SC++ replace TOT, ImageNet, MSCOCO R@5, DOCCI R@5, IIW R@5, " in out
    assert " ≠ |" not in out and "Computed by another" not in out and "Not reproducible here: Flickr8K (Table 5 names no metric" in out
    assert "## Against the c2lip paper" in (tmp_path / "report" / "report.md").read_text()
    code, out, _ = run_main(capsys, "report", ours, "--out", tmp_path / "r2", "--paper", "c2lip", "--paper-model",
                            "SigLIP ViT-B/16 (ft. CC3M)")
    assert code == 0 and "| SC swap | Table 2 | 69.7 | 70.0 | +0.3 |" in out
    code, _, err = run_main(capsys, "report", ours, "--out", tmp_path / "r3", "--paper", "c2lip", "--paper-model", "C3LIP")
    assert code == 2 and "the c2lip paper has no such row; its rows: SigLIP ViT-B/16, " in err and not (tmp_path / "r3").exists()
    code, _, err = run_main(capsys, "report", ours, "--out", tmp_path / "r3", "--paper", "negclap")
    assert code == 2 and err.startswith("error: --paper negclap: no such paper; known: c2lip, clic, hardneg, occlip")


def test_the_paper_table_names_the_models_beside_its_row_and_marks_an_incomplete_result(tmp_path, capsys):
    """A toy model's results beside the paper's ViT-B/16 row: the heading names each folder's model and says a bundled
    one is not the paper's; a column from a result with missing images is marked ≠ and said incomplete."""
    toy = result_folder(tmp_path, "toy", {"sugarcrepe": {"add": 0.5, "replace": 0.5, "swap": 0.5}})
    real = result_folder(tmp_path, "real", {"sugarcrepe": {"add": 0.9, "replace": 0.8, "swap": 0.7}})
    for folder, model, pretrained, complete in ((toy, "compclip-tiny-siglip", "", False), (real, "ViT-B-16-SigLIP", "webli", True)):
        record = json.loads((folder / "sugarcrepe.json").read_text())
        (folder / "sugarcrepe.json").write_text(json.dumps({**record, "model": model, "pretrained": pretrained, "complete": complete}))
    code, out, err = run_main(capsys, "report", toy, real, "--out", tmp_path / "report", "--paper", "c2lip")
    assert code == 0, err
    assert ("yours are the models your results scored (toy: compclip-tiny-siglip (a toy model compclip bundles, "
            "compclip-tiny-siglip: not the paper's); real: ViT-B-16-SigLIP webli)") in out
    assert "| SC add | Table 2 | 94.2 | 50.0 ≠ | -44.2 | 90.0 | -4.2 |" in out
    assert "SC add (toy): sugarcrepe incomplete (images or files were missing)" in out


def test_every_recipe_names_the_published_row_it_reproduces():
    from compclip.eval.report import paper_numbers

    for name in list_recipes():
        numbers = get_recipe(name).numbers
        assert numbers["model"] in {r["model"] for r in paper_numbers(numbers["paper"])["rows"]}, name


def test_every_recipe_starts_from_the_weights_it_names(tmp_path):
    """As shipped, each recipe's model and pretrained tag pass compclip's activation guard and reach open_clip's download
    of the hub file its registry names (offline here, so the fetch itself is what fails: not in the cache, not a refusal).
    Seven recipes named OpenAI's weights under the GELU ViT-B-32 and stopped at the guard."""
    import open_clip

    from compclip.errors import MissingFileError
    from compclip.models import load_model

    named = {(get_recipe(n).settings["model"], get_recipe(n).settings["pretrained"]) for n in list_recipes()}
    assert named == RECIPE_WEIGHTS
    for model, tag in sorted(named):
        hub = open_clip.get_pretrained_cfg(model, tag).get("hf_hub")
        assert hub, (model, tag)
        with pytest.raises(MissingFileError, match=rf"^{model} {tag}: {hub.strip('/')}/open_clip_model\.safetensors or "):
            load_model(model, tag)


@pytest.fixture(scope="module")
def stand_in_hubs(tmp_path_factory):
    """One huggingface_hub cache per (model, tag) of the recipes, made when first asked for: random weights of the
    right shapes at the repository and file open_clip's registry names, and for SigLIP its hub tokenizer."""
    import shutil

    import open_clip
    from safetensors.torch import save_file

    from conftest import plant_hub_repo

    made = {}

    def hub(model: str, tag: str):
        if (model, tag) not in made:
            root = tmp_path_factory.mktemp("hub")
            torch.manual_seed(0)
            state = {k: v.contiguous() for k, v in open_clip.create_model(model).state_dict().items()}
            files = {"weights": lambda snapshot: save_file(state, snapshot / "open_clip_model.safetensors")}
            if "SigLIP" in model:
                files["tokenizer"] = _stand_in_tokenizer
            plant_hub_repo(root, open_clip.get_pretrained_cfg(model, tag)["hf_hub"].strip("/"), files)
            made[(model, tag)] = root
        return made[(model, tag)]

    yield hub
    for root in made.values():  # several hundred MB each
        shutil.rmtree(root, ignore_errors=True)


def _stand_in_tokenizer(snapshot):
    """A tokenizer that `AutoTokenizer.from_pretrained` loads as SigLIP's hub repository serves one (ids below its vocab)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "</s>", "<unk>", "a", "the", "big", "small", "red", "blue", "dog", "cat", "to", "left", "right", "of"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>").save_pretrained(snapshot)


@pytest.fixture(scope="module")
def recipe_data(tmp_path_factory):
    """Eight photos whose captions hold every hard-negative class (colour, object, location, size), as a CSV, as JSON lines
    with two dense captions each (DAC's data field), a negative image and caption (TripletCLIP's: the next photo and its
    caption), a negated caption and distractor (CoN-CLIP's) and language-model negatives (SVLC-R+L's), and as webdataset
    shards for a recipe that draws shards with replacement (jpg + txt, and TripletCLIP's released members neg_image +
    neg_caption), and their concepts (noun phrases, POS tags, scene graphs: what every recipe's method reads)."""
    import io
    import tarfile

    from PIL import Image, ImageDraw

    from compclip.concepts import build_store

    root = tmp_path_factory.mktemp("recipe-data")
    (root / "img").mkdir()
    rows = []
    for i in range(8):
        img = Image.new("RGB", (64, 64), (120, 120, 120))
        ImageDraw.Draw(img).rectangle([4, 20, 28, 44], fill=((220, 40, 40), (40, 70, 220))[i % 2])
        img.save(root / "img" / f"{i}.jpg")
        size, other = ("big", "small") if i % 2 else ("small", "big")
        colour, second = ("red", "blue") if i % 4 < 2 else ("blue", "red")
        side = "left" if i < 4 else "right"
        rows.append((f"img/{i}.jpg", f"a {size} {colour} dog to the {side} of a {other} {second} cat"))
    csv = root / "train.csv"
    csv.write_text("image,caption\n" + "".join(f"{image},{caption}\n" for image, caption in rows))
    (root / "train.jsonl").write_text("".join(json.dumps({"image": image, "caption": caption, "dense_captions": [
        caption.split(" to the ")[0], f"a {caption.split()[-2]} cat"], "negative_image": rows[(i + 1) % 8][0],
        "negative_caption": rows[(i + 1) % 8][1], "negated_caption": caption.split(" to the ")[0].replace(" a ", " no ", 1),
        "distractor_image": rows[(i + 2) % 8][0], "neg_image": [(i + 1) % 8, (i + 2) % 8],
        "llm_negatives": [[[caption.replace(" dog ", " horse ")]], [[caption.replace(" of ", " under ")]]]}) + "\n"
        for i, (image, caption) in enumerate(rows)))
    for s in range(2):
        with tarfile.open(root / f"shard-{s:03d}.tar", "w") as tar:
            for i, (image, caption) in enumerate(rows[s * 4:(s + 1) * 4], s * 4):
                negative, negative_caption = rows[(i + 1) % 8]
                for ext, payload in (("jpg", (root / image).read_bytes()), ("txt", caption.encode()),
                                     ("neg_image", (root / negative).read_bytes()), ("neg_caption", negative_caption.encode())):
                    info = tarfile.TarInfo(f"{i:05d}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    build_store([caption for _, caption in rows], root / "store", what=("noun_phrases", "pos", "graph"))
    return csv, str(root / "shard-{000..001}.tar"), root / "store"


def steps_in_its_own_precision(name: str) -> bool:
    """Whether a recipe trains its step here in its own precision: the fp32 ones. On a CPU a ViT-B's step takes seconds in
    fp32, half a minute in fp16 autocast and minutes in open_clip's bf16 weights: the others step in fp32 (`--precision
    fp32`, a flag over the recipe, which the run records). The precisions themselves train in tests/test_train.py on a
    tiny model: fp16 autocast with its loss scaling, bf16 autocast resumed exactly, C2LIP in bf16 weights against fp32."""
    return get_recipe(name).settings.get("precision", "fp32") == "fp32"


@pytest.mark.parametrize("name", list_recipes())
def test_every_recipe_trains_from_its_pretrained_weights_offline_and_is_compared_with_its_row(name, tmp_path, capsys, monkeypatch,
                                                                                              stand_in_hubs, recipe_data):
    """`train --recipe NAME` as a user runs it, no flag beyond the data, the concepts, the run's length and size: the
    pretrained weights (and SigLIP's hub tokenizer) come through open_clip's own download path (stand-ins of the right
    shapes in the hub cache, offline), one step trains (in the recipe's precision where
    `steps_in_its_own_precision`), the checkpoint is evaluated, and `report --paper` sets it beside the paper's row the
    recipe names."""
    recipe = get_recipe(name)
    own_precision = steps_in_its_own_precision(name)
    precision = [] if own_precision else ["--precision", "fp32"]
    hub = stand_in_hubs(recipe.settings["model"], recipe.settings["pretrained"])
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    csv, shards, store = recipe_data
    data = shards if recipe.settings.get("dataset_resampled") else csv
    method = build_method(recipe.settings["method"], **recipe.settings.get("method_options", {}))
    if method.sample_fields and data == csv:  # a method that reads data fields: records that hold them
        data = csv.with_suffix(".jsonl")
    code, _, err = run_main(capsys, "-q", "train", "--recipe", name, "--train-data", data, "--concepts", store, *precision,
                            "--steps", "1", "--batch-size", "2", "--accum-freq", "1", "--workers", "0", "--out", tmp_path / "run")
    assert code == 0, err[-3000:]
    said = (tmp_path / "run" / "train.log").read_text()
    for departure in recipe.departures:  # each said before the first step, in the run's log
        assert f"recipe {name} departs from the paper: {departure}" in said.split("step 1")[0], departure
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    kept = {k: record[k] for k in ("model", "pretrained", "precision", "seed", "dataset_resampled", "lr", "optimizer")}
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert kept == {k: recipe.settings.get(k, defaults[k]) for k in kept} | ({} if own_precision else {"precision": "fp32"}), name
    if not own_precision and recipe.settings.get("precision", "fp32") != "fp32":
        wanted = recipe.settings["precision"]
        assert record["recipe_record"]["overrides"]["precision"] == {"recipe": wanted, "run": "fp32"}
    checkpoint = tmp_path / "run" / "checkpoints" / "step_0000001"
    assert json.loads((checkpoint / "config.json").read_text())["pretrained"] == recipe.settings["pretrained"]
    root = tmp_path / "bench"
    (root / "sugarcrepe").mkdir(parents=True)
    (root / "coco" / "val2017").mkdir(parents=True)
    (root / "coco" / "val2017" / "000000000001.jpg").write_bytes((csv.parent / "img" / "0.jpg").read_bytes())
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps({"0": {
        "filename": "000000000001.jpg", "caption": "a small red dog to the left of a big blue cat",
        "negative_caption": "a small blue dog to the left of a big red cat"}}))
    code, _, err = run_main(capsys, "-q", "eval", "--model", checkpoint, "--benchmark", "sugarcrepe/swap_att", "--data-root", root,
                            "--workers", "0", "--out", tmp_path / "results")
    assert code == 0, err[-3000:]
    code, _, err = run_main(capsys, "-q", "report", tmp_path / "results", "--out", tmp_path / "report", "--paper",
                            recipe.numbers["paper"], "--paper-model", recipe.numbers["model"])
    assert code == 0, err[-3000:]
    assert f"row {recipe.numbers['model']!r}" in (tmp_path / "report" / "paper.md").read_text()


def test_hardnegs_epochs_are_passes_over_the_captions_its_class_admits(tmp_path, capsys):
    """hardneg-color trains on the captions that name a colour (§3.3's per-concept subsets): its 3 epochs are 3 passes
    over those 6 of the 16 records, 18 samples, 5 steps of 4 (not 12 steps over every record); config.json records both
    counts. A method that trains on every caption counts every record."""
    data = make_dataset(tmp_path, n=16)
    header, *rows = data.read_text().splitlines()
    plain = [row.split(",")[0] + ",a square to the left of a circle" for row in rows[:10]]
    data.write_text("\n".join([header, *plain, *rows[10:]]) + "\n")  # 10 captions without a colour, 6 with
    args = ["-q", "train", "--recipe", "hardneg-color", "--model", "compclip-tiny-clip", "--train-data", data, "--out", tmp_path / "run",
            "--batch-size", "2", "--global-batch-size", "4", "--workers", "0"]
    code, _, err = run_main(capsys, *args)
    assert code == 0, err
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (record["epochs"], record["steps"], record["epoch_records"]) == (3, math.ceil(3 * 6 / 4), {"records": 16, "admitted": 6})
    logged = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5]
    plain_clip = TrainConfig.from_given({"method": "clip", "model": "compclip-tiny-clip", "train_data": str(data), "epochs": 3,
                                         "out": str(tmp_path / "clip"), "batch_size": 4, "workers": 0})
    assert Trainer(plain_clip).cfg.steps == math.ceil(3 * 16 / 4)


def test_hardnegs_epochs_count_its_captions_and_the_bad_records_as_the_docs_say(tmp_path):
    """docs/methods.md: --epochs counts the data file's records, bad ones included, as open_clip counts them; a method
    that trains on some captions only counts those. So keyword_captions_only's 3 epochs over colour captions count the
    colour captions, a colour caption whose image is missing among them, and the records without a caption (nothing to
    judge), but not a plain caption, whatever its image: the steps planned are ⌈3 × that count / 4⌉."""
    data = make_dataset(tmp_path, n=8)
    header, *rows = data.read_text().splitlines()
    rows = [rows[0].split(",")[0] + ",a square to the left of a circle", *rows[1:],
            "img/1.jpg,", "img/2.jpg,   ", "img/gone.jpg,a red square", "img/gone.jpg,a square", "img/3.jpg,a plain square"]
    data.write_text("\n".join([header, *rows]) + "\n")
    captions = [row.split(",", 1)[1] for row in rows]
    counted = sum(not c.strip() or any(colour in c.split() for colour in ("red", "green", "blue", "yellow")) for c in captions)
    assert (len(captions), counted) == (13, 10)  # 7 colour captions of images, 1 of a missing image, 2 without a caption
    cfg = TrainConfig(method="hardneg", model="compclip-tiny-clip", train_data=str(data), out=str(tmp_path / "run"), epochs=3,
                      batch_size=4, workers=0, method_options={"negative_classes": "color", "keyword_captions_only": True})
    trainer = Trainer(cfg)
    assert trainer.epoch_records == {"records": 13, "admitted": counted}
    assert trainer.cfg.steps == math.ceil(3 * counted / 4) == 8


def adam_steps(start, grads, decayed, reading, lr, wd, clip, betas=(0.9, 0.999), eps=1e-8):
    """Adam written out in float64 over `grads` (one {name: gradient} a step): each step's gradients clipped to the global
    norm `clip`, then the decay as `reading` applies it to the `decayed` names: "decoupled" w <- w - lr·(m̂/(√v̂+ε) + wd·w)
    (AdamW, Loshchilov & Hutter), "coupled" wd·w added to the gradient first (L2, torch's Adam)."""
    w = {n: t.double() for n, t in start.items()}
    m = {n: torch.zeros_like(t) for n, t in w.items()}
    v = {n: torch.zeros_like(t) for n, t in w.items()}
    for t, step in enumerate(grads, 1):
        norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in step.values()))
        scale = min(1.0, clip / (norm + 1e-6))
        for n in w:
            g = step[n].double() * scale + (wd * w[n] if reading == "coupled" and n in decayed else 0)
            m[n] = betas[0] * m[n] + (1 - betas[0]) * g
            v[n] = betas[1] * v[n] + (1 - betas[1]) * g * g
            update = (m[n] / (1 - betas[0] ** t)) / ((v[n] / (1 - betas[1] ** t)).sqrt() + eps)
            w[n] = w[n] - lr * (update + (wd * w[n] if reading == "decoupled" and n in decayed else 0))
    return w


@pytest.mark.parametrize("reading", ["decoupled", "coupled"])
def test_hardneg_recipes_decouple_the_weight_decay_and_clip_as_transformers_trainer(reading, tmp_path):
    """Rösch et al. §3.2 train "with Adam optimizer with weight decay of 0.1" in code based on transformers v4.30, whose
    Trainer's optimizer decouples the decay (AdamW), leaves biases and LayerNorm weights undecayed and clips the
    gradients at norm 1.0: every hardneg recipe builds that. Two real steps of hardneg-color (fp32 and lr 1e-2 given
    beside it, so that the decay and the clipping show in float32) end where Adam written out puts them, and
    `--optimizer adam`, the decay added to the gradient, stays reachable and ends where that reading puts them."""
    data = make_dataset(tmp_path, n=8)
    for name in (f"hardneg-{c}" for c in ("color", "object", "location", "size")):
        cfg = TrainConfig.from_given({"recipe": name, "model": "compclip-tiny-clip", "train_data": str(data), "workers": 0,
                                      "out": str(tmp_path / name)})
        assert (cfg.optimizer, cfg.weight_decay, cfg.grad_clip_norm, cfg.betas, cfg.eps) == ("adamw", 0.1, 1.0, (0.9, 0.999), 1e-8)
    given = {"optimizer": "adam"} if reading == "coupled" else {}
    cfg = TrainConfig.from_given({"recipe": "hardneg-color", "model": "compclip-tiny-clip", "train_data": str(data), "workers": 0,
                                  "out": str(tmp_path / "run"), "steps": 2, "batch_size": 4, "global_batch_size": 4, "lr": 1e-2,
                                  "precision": "fp32", **given})
    trainer = Trainer(cfg)
    assert type(trainer.optimizer) is (torch.optim.Adam if reading == "coupled" else torch.optim.AdamW)
    model = trainer.model
    norms = {f"{m}.{k}" if m else k for m, mod in model.named_modules() if isinstance(mod, torch.nn.LayerNorm)
             for k, _ in mod.named_parameters(recurse=False)}
    # no decay on LayerNorm weights and biases (the Trainer's), nor on the class embedding and the logit scale (open_clip's)
    decayed = {n for n, _ in model.named_parameters() if n not in norms and "bias" not in n
               and n not in ("visual.class_embedding", "logit_scale")}
    assert {"token_embedding.weight", "visual.conv1.weight", "text_projection"} <= decayed and "ln_final.weight" in norms
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = [{}, {}]

    def keep(name):  # each step's gradient as the backward pass leaves it, before clipping
        return lambda p: grads[trainer.step].__setitem__(name, p.grad.clone())

    for n, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(keep(n))
    trainer.run()
    logged = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert all(r["grad_norm"] > 1.5 for r in logged)  # the clipping acts at both steps
    expected = adam_steps(start, grads, decayed, reading, 1e-2, 0.1, 1.0)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach().double(), expected[n], rtol=0, atol=2e-6, msg=n)


def test_a_recipes_batch_refusal_over_json_lines_is_one_line_and_each_way_on_it_names_passes(tmp_path, capsys):
    """`train --recipe ceclip-coco --batch-size 8` on a JSON lines file (CE-CLIP's own data is COCO's captions): the
    recipe's epochs count the file's records, then its global batch of 1512 is refused in one line; each way on the
    line names, typed as it says, is past that refusal (to the next thing the run lacks: CE-CLIP's concepts)."""
    rows = make_dataset(tmp_path, n=8).read_text().splitlines()[1:]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"image": image, "caption": caption}) + "\n" for image, caption in (r.split(",", 1) for r in rows)))
    given = ["-q", "train", "--recipe", "ceclip-coco", "--batch-size", "8", "--train-data", data, "--workers", "0"]
    code, _, err = run_main(capsys, *given, "--out", tmp_path / "refused")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --recipe ceclip-coco: global batch 1512 = 8 per rank"), err
    typed = re.findall(r"--global-batch-size \d+|--accept-accum", err)
    assert sorted(typed) == ["--accept-accum", "--global-batch-size 128", "--global-batch-size 1512"], err
    for k, way in enumerate(typed):
        code, _, err = run_main(capsys, *given, *way.split(), "--out", tmp_path / f"way-{k}")
        assert code == 2 and "global batch" not in err and "method ceclip trains on concepts" in err, (way, err)
