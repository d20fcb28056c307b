"""A method that owns parameters: trained by the optimizer at its own learning rate, saved beside the
open_clip weights, restored on resume, and evaluated through its own scorer (the contract OC-CLIP needs)."""
import json
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compclip.eval import DualEncoderScorer, Scorer, load_scorer
from compclip.gather import Gather
from compclip.methods import register_method
from compclip.methods.base import LossPart, option, sigmoid_pairs_loss
from test_train import make_dataset


class GainScorer(Scorer):
    """Scores of the dual encoder times the learned gain: a score that is not the plain dot product."""

    def __init__(self, dual: DualEncoderScorer, gain: torch.Tensor):
        self.dual, self.gain, self.encoded = dual, float(gain.exp()), dual.encoded

    def pairs(self, images, texts, boxes=None):
        return self.gain * self.dual.pairs(images, texts, boxes)

    def matrix(self, images, texts):
        return self.gain * self.dual.matrix(images, texts)


class GainLoss(LossPart):
    """SigLIP with a learned gain e^g on every logit: the smallest module a method can own."""

    name = "gain"
    contrastive = True
    uses_logit_bias = True

    def __init__(self, lr: float):
        super().__init__()
        self.gain = nn.Parameter(torch.zeros(()))
        self.lr = lr
        self.gather = Gather()  # the trainer sets the run's rank and world size (`Method.distribute`)

    def forward(self, out):
        image, gather = out["image_features"], self.gather
        counts = gather.counts(image)
        texts = gather.rows(out["text_features"], counts)
        logits = self.gain.exp() * out["logit_scale"] * image @ texts.T + out["logit_bias"]
        rows = gather.local_rows(counts, image.device)
        positive = rows[:, None] == torch.arange(texts.shape[0], device=image.device)[None, :]
        return {"gain": gather.total(sigmoid_pairs_loss(logits, positive, texts.shape[0]))}

    def scorer(self, model, preprocess, tokenizer, **kwargs):
        return GainScorer(DualEncoderScorer(model, preprocess, tokenizer, **kwargs), self.gain.detach())


@dataclass(frozen=True)
class GainOptions:
    lr: float = option(0.05, "learning rate of the gain")


@pytest.fixture(autouse=True, scope="module")
def gain_method():
    """The toy method is registered for this module's tests only: other tests see the shipped registry."""
    from compclip import methods

    register_method("gain", lambda o, *, concepts=None, seed=0: [GainLoss(o.lr)], GainOptions)
    yield
    methods.METHODS.remove("gain")


def test_a_method_declares_the_concept_fields_it_reads(tmp_path):
    """Registered from outside the package with the fields it reads: a store without them is refused before any step,
    and a combination reads the union."""
    from compclip import methods
    from compclip.concepts import ConceptStore, build_store
    from compclip.methods import build_method, method_concept_fields

    register_method("gain_pos", lambda o, *, concepts=None, seed=0: [GainLoss(o.lr)], GainOptions, ("pos",))
    try:
        assert method_concept_fields("gain_pos") == ("pos",) and method_concept_fields("c2lip+gain_pos") == ("noun_phrases", "pos")
        build_store(["a red car"], tmp_path / "np", "noun-phrases")
        with pytest.raises(ValueError, match=r"reads concept fields \['pos'\].*--what pos"):
            build_method("gain_pos", concepts=ConceptStore(tmp_path / "np"))
        assert build_method("gain_pos").name == "gain_pos"  # no store: nothing to check yet
    finally:
        methods.METHODS.remove("gain_pos")


def config(tmp_path, steps, out="run"):
    from compclip.train import TrainConfig

    data = tmp_path / "train.csv" if (tmp_path / "train.csv").is_file() else make_dataset(tmp_path, n=16)
    return TrainConfig(method="gain", model="compclip-tiny-siglip", train_data=str(data), out=str(tmp_path / out), batch_size=8,
                       steps=steps, lr=1e-4, schedule="const", save_every=2, keep=3, workers=0, method_options={"lr": 0.05})


def losses(tmp_path, out):
    return [json.loads(line)["loss"] for line in (tmp_path / out / "log.jsonl").read_text().splitlines()]


def test_a_method_module_trains_checkpoints_and_resumes_exactly(tmp_path):
    from compclip.train import train

    train(config(tmp_path, 4, "straight"))
    train(config(tmp_path, 2, "resumed"))  # a constant rate: stopping at 2 of 4 changes no step's learning rate
    train(config(tmp_path, 4, "resumed"))  # picks up at step 2, the end of the first epoch
    assert losses(tmp_path, "resumed") == losses(tmp_path, "straight")
    for out in ("straight", "resumed"):
        folder = tmp_path / out / "checkpoints" / "step_0000004"
        assert json.loads((folder / "config.json").read_text())["method_weights"] == "method.safetensors"
    from safetensors.torch import load_file

    a = load_file(tmp_path / "straight" / "checkpoints" / "step_0000004" / "method.safetensors")
    b = load_file(tmp_path / "resumed" / "checkpoints" / "step_0000004" / "method.safetensors")
    assert a.keys() == {"parts.0.gain"} and torch.equal(a["parts.0.gain"], b["parts.0.gain"])
    assert a["parts.0.gain"].item() != 0.0  # the optimizer covered the method's parameter


def test_the_method_module_has_its_own_learning_rate(tmp_path):
    from compclip.train import Trainer

    trainer = Trainer(config(tmp_path, 2))
    rates = {id(p): g["lr"] for g in trainer.optimizer.param_groups for p in g["params"]}
    assert rates[id(trainer.method.parts[0].gain)] == pytest.approx(0.05)
    assert rates[id(trainer.model.logit_scale)] == pytest.approx(1e-4)


def test_training_from_a_checkpoint_of_the_method_goes_on_with_its_modules(tmp_path):
    from dataclasses import replace

    from safetensors.torch import load_file

    from compclip.train import Trainer, train

    train(config(tmp_path, 2, "first"))
    folder = tmp_path / "first" / "checkpoints" / "step_0000002"
    saved = load_file(folder / "method.safetensors")["parts.0.gain"]
    assert saved.item() != 0.0
    again = Trainer(replace(config(tmp_path, 2, "second"), model=str(folder)))
    assert torch.equal(again.method.parts[0].gain.detach().cpu(), saved)  # a second stage, not a fresh module
    from compclip import methods

    register_method("gain2", lambda o, *, concepts=None, seed=0: [GainLoss(o.lr)], GainOptions)  # same module, other method
    try:
        other = Trainer(replace(config(tmp_path, 2, "third"), model=str(folder), method="gain2"))
    finally:
        methods.METHODS.remove("gain2")
    assert other.method.parts[0].gain.item() == 0.0


def test_a_method_checkpoint_evaluates_through_its_own_scorer(tmp_path):
    from compclip.train import train

    train(config(tmp_path, 2))
    folder = tmp_path / "run" / "checkpoints" / "step_0000002"
    scorer = load_scorer(str(folder), workers=0)
    assert isinstance(scorer, GainScorer)
    image = tmp_path / "img" / "0.jpg"
    from safetensors.torch import load_file

    saved = load_file(folder / "method.safetensors")["parts.0.gain"]
    assert saved.item() != 0.0 and scorer.gain == pytest.approx(saved.exp().item())
    dual = scorer.dual.pairs([image], ["a red square"])
    assert scorer.pairs([image], ["a red square"]).item() == pytest.approx(scorer.gain * dual.item())


def test_export_says_the_method_module_is_not_part_of_it(tmp_path):
    from compclip.export import export
    from compclip.train import train

    train(config(tmp_path, 2))
    checkpoint = tmp_path / "run" / "checkpoints" / "step_0000002"
    _, usage, _ = export(checkpoint, tmp_path / "plain.safetensors")
    assert "not part of this export" in usage and "method.safetensors" in usage
    for fmt in ("open_clip", "hf"):  # said on the command line and in the model card
        out, _, notes = export(checkpoint, tmp_path / fmt, fmt)
        assert any("method.safetensors" in n and "not part of this export" in n for n in notes)
        assert "not part of this export" in (out / "README.md").read_text()


def test_gain_loss_is_siglip_at_zero_gain():
    from compclip.methods.siglip import SigLIPPart

    image, text = F.normalize(torch.randn(4, 8), dim=-1), F.normalize(torch.randn(4, 8), dim=-1)
    out = {"image_features": image, "text_features": text, "logit_scale": torch.tensor(10.0), "logit_bias": torch.tensor(-2.0)}
    assert GainLoss(0.1)(out)["gain"].item() == pytest.approx(SigLIPPart()(out)["siglip"].item())
