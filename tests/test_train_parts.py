"""The training loop's parts on their own, without a model or a run: the schedule against open_clip_train's, the
parameter groups against open_clip_train's rule, the NaN guard, the stop signal, the lost-peer words."""
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


def test_the_schedule_warms_up_from_and_decays_to_the_floors_given():
    ours = lr_schedule(1.0, 20, warmup=4, warmup_lr=0.2, min_lr=0.1)
    assert ours(0) == pytest.approx(0.2 + 0.8 / 4) and ours(3) == pytest.approx(1.0) and ours(4) == pytest.approx(1.0)
    assert ours(20) == pytest.approx(0.1) and ours(50) == pytest.approx(0.1)  # past the end: the floor
    assert ours(12) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 8 / 16)))


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


def test_a_stop_signal_is_noted_not_obeyed_and_the_handlers_come_back():
    signals = StopSignals()
    before = signal.getsignal(signal.SIGUSR1)
    with signals.installed():
        assert signals.asked(DistEnv()) is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.asked(DistEnv()) == signal.SIGUSR1 and signals.flag.value == 1
    assert signal.getsignal(signal.SIGUSR1) is before
