"""The training loop's parts on their own, without a model or a run: the schedule against open_clip_train's, the
parameter groups against open_clip_train's rule, the NaN guard, the stop signal, the lost-peer words."""
import dataclasses
import math
import os
import signal

import pytest
import torch
from torch import nn

from compclip.train.distributed import DistEnv
from compclip.train.faults import NonFiniteGuard, StopSignals
from compclip.train.optim import lr_schedule, make_optimizer, param_groups


@pytest.mark.parametrize("schedule, warmup", [("cosine", 0), ("cosine", 10), ("const", 10), ("const", 0)])
def test_the_schedule_is_open_clip_trains(schedule, warmup):
    """Each step's rate equals open_clip_train's `cosine_lr` / `const_lr` (the rate it assigns before that step)."""
    from open_clip_train.scheduler import const_lr, cosine_lr

    theirs = (cosine_lr if schedule == "cosine" else const_lr)(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1e-3), 1e-3,
                                                                 warmup, 100)
    ours = lr_schedule(1e-3, 100, warmup, schedule)
    assert [1e-3 * ours(step) for step in range(100)] == pytest.approx([theirs(step) for step in range(100)], rel=1e-12, abs=1e-18)


@pytest.mark.parametrize("peak", [1.0, 2e-3])
def test_the_schedule_warms_up_from_and_decays_to_the_floors_given(peak):
    """The floors are rates, the schedule's values shares of the peak: at a peak of 1 the two are the same number, so a
    second peak tells a rate from a share. Read as torch's LambdaLR applies it, against the formula in rates."""
    start, floor = 0.2 * peak, 0.1 * peak
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=peak)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(peak, 20, warmup=4, warmup_lr=start, min_lr=floor))
    rates = []
    for _ in range(51):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[0] == pytest.approx(start + (peak - start) / 4) and rates[3] == pytest.approx(peak) and rates[4] == pytest.approx(peak)
    assert rates[20] == pytest.approx(floor) and rates[50] == pytest.approx(floor)  # past the end: the floor
    assert rates[12] == pytest.approx(floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * 8 / 16)))


def test_parameter_groups_follow_open_clip_trains_exclusion_rule():
    """open_clip_train's main: `exclude = p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n`."""
    named = [("visual.conv1.weight", torch.zeros(4, 3, 2, 2)), ("visual.ln_pre.weight", torch.zeros(4)),
             ("transformer.resblocks.0.ln_1.bias", torch.zeros(4)), ("text_projection", torch.zeros(4, 4)),
             ("logit_scale", torch.zeros(())), ("positional_embedding", torch.zeros(7, 4)), ("attn.in_proj_bias", torch.zeros(12)),
             ("frozen.weight", torch.zeros(4, 4)), ("head.ln_proj.weight", torch.zeros(4, 4)), ("stem.bn.weight", torch.zeros(4, 4))]
    params = {n: nn.Parameter(t, requires_grad=n != "frozen.weight") for n, t in named}
    no_decay, decay = param_groups(params.items(), 0.2)
    assert (no_decay["weight_decay"], decay["weight_decay"]) == (0.0, 0.2)
    names = {id(p): n for n, p in params.items()}
    assert {names[id(p)] for p in decay["params"]} == {"visual.conv1.weight", "text_projection", "positional_embedding"}
    assert {names[id(p)] for p in no_decay["params"]} == {"visual.ln_pre.weight", "transformer.resblocks.0.ln_1.bias", "logit_scale",
                                                          "attn.in_proj_bias", "head.ln_proj.weight", "stem.bn.weight"}
    adamw = make_optimizer("adamw", [no_decay, decay], 1e-3, (0.9, 0.98), 1e-6)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["betas"] == (0.9, 0.98) and adamw.defaults["fused"]
    assert type(make_optimizer("sgd", [no_decay, decay], 1e-3, (0.9, 0.98), 1e-6)) is torch.optim.SGD


def test_the_nonfinite_guard_skips_then_stops(tmp_path, caplog):
    weight = nn.Parameter(torch.zeros(2))
    weight.grad = torch.tensor([1.0, float("nan")])
    guard = NonFiniteGuard(1, tmp_path)
    assert not guard.skips(0, {"loss": 1.0}, [], scaled=False)
    assert guard.skips(4, {"loss": 1.0}, [("w", weight)], scaled=False)  # the gradient of w
    assert "step 5: the gradient of w is not finite: skipped, no update (1 of --skip-nonfinite 1)" in caplog.text
    assert not guard.skips(5, {"loss": 1.0}, [("w", weight)], scaled=True)  # under loss scaling the scaler skips it
    with pytest.raises(FloatingPointError, match=r"step 7: loss term npc is nan: training stopped before the update"):
        guard.skips(6, {"siglip": 1.0, "npc": float("nan")}, [], scaled=False)


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_the_nonfinite_guard_catches_an_infinity_as_well_as_a_nan(tmp_path, bad):
    """In a loss term, and in a gradient under a finite loss; the guard names which."""
    guard = NonFiniteGuard(0, tmp_path)
    with pytest.raises(FloatingPointError, match=f"step 1: loss term xac is {bad}"):
        guard.skips(0, {"siglip": 0.5, "xac": bad}, [], scaled=False)
    weight, fine = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2))
    weight.grad, fine.grad = torch.tensor([0.0, bad, 1.0]), torch.ones(2)
    with pytest.raises(FloatingPointError, match=r"step 3: the gradient of head\.weight is not finite"):
        guard.skips(2, {"siglip": 0.5}, [("fine", fine), ("head.weight", weight)], scaled=False)


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_a_finite_loss_with_a_nan_gradient_is_the_guards_in_fp32_and_the_scalers_under_amp(tmp_path, precision):
    """A real run whose loss stays finite while a gradient turns NaN (a hook on the text projection's gradient): in fp32
    the guard stops the run before the update; under amp's loss scaling the scaler skips the step itself and the run
    ends, its weights finite."""
    from compclip.train import Trainer
    from test_train import settings_config

    trainer = Trainer(settings_config(tmp_path, "run", steps=2, precision=precision, model="compclip-tiny-clip", method="clip",
                                      report_to="none"))
    trainer.model.text_projection.register_hook(lambda grad: grad * float("nan"))
    if precision == "fp32":
        with pytest.raises(FloatingPointError, match="step 1: the gradient of text_projection is not finite: training stopped"):
            trainer.run()
    else:
        trainer.run()
        assert trainer.state.step == 2 and trainer.state.scaler.get_scale() < 2.0 ** 16  # the scaler backed off
        assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


@pytest.mark.parametrize(("batch_size", "accum_freq", "world_size"), [(1, 2, 1), (1, 1, 2), (2, 1, 1)])
def test_a_step_of_two_images_is_accepted_however_it_is_made_up(tmp_path, batch_size, accum_freq, world_size):
    """Two images a step, by accumulation, by a second process or in one micro-batch, each has its negative; one is
    refused (the refusal's own test is test_train's)."""
    from compclip.train import TrainConfig
    from compclip.train.refusals import refuse_what_cannot_learn

    cfg = TrainConfig(method="clip", model="m", train_data="d.csv", out=str(tmp_path), batch_size=batch_size, accum_freq=accum_freq)
    refuse_what_cannot_learn(cfg, nn.Linear(2, 2), nn.Module(), world_size)
    with pytest.raises(ValueError, match="has no negative"):
        refuse_what_cannot_learn(dataclasses.replace(cfg, batch_size=1, accum_freq=1), nn.Linear(2, 2), nn.Module(), 1)


def test_a_stop_signal_is_noted_not_obeyed_and_the_handlers_come_back():
    signals = StopSignals()
    before = signal.getsignal(signal.SIGUSR1)
    with signals.installed():
        assert signals.asked(DistEnv(), 0) is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.asked(DistEnv(), 0) == signal.SIGUSR1 and signals.flag.value == 1
    assert signal.getsignal(signal.SIGUSR1) is before
