"""One loss step (C2LIP by default) on a fixed batch of 8, split over however many processes run this.

Run alone it uses the whole batch; under torchrun (or with SLURM's variables) each rank
takes its share. Rank 0 saves the loss terms and every parameter's gradient: of one step, or with CASES
(`ACCUM:METHOD,...`) of each case in turn, in one launch ({case: result}).
Usage: python dist_grads.py OUT.pt [ACCUM_FREQ [METHOD] | CASES]
"""
import functools
import os
import sys

import torch

CAPTIONS = [
    "a red couch next to a white table",
    "a man riding a horse on the beach",
    "something nice",
    "two dogs and a cat on a bed",
    "a blue car",
    "very bright",
    "a small bird under a large umbrella near a tree",
    "a cup",
]
# each caption's dense captions (DAC's data field), a method that reads none ignores them
DENSE = [["the couch is red", "a white wooden table"], ["a man on a brown horse", "waves on a sandy beach"], [],
         ["two small dogs sleeping", "a black cat", "a soft bed"], ["a blue car parked"], ["a bright light"],
         ["a small yellow bird", "a large umbrella"], ["a cup on a table"]]
# each sample's hard negative, TripletCLIP's data fields (its image: NEGATIVE_IMAGES[i]); a method that reads none ignores them
NEGATIVE_CAPTIONS = ["a white couch next to a red table", "a horse riding a man on the beach", "something bad",
                     "two cats and a dog on a bed", "a red car", "very dark", "a large bird under a small umbrella near a tree",
                     "a plate"]
NEGATIVE_IMAGES = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
# each sample's negated caption and distractor image, CoN-CLIP's data fields (its image: DISTRACTOR_IMAGES[i])
NEGATED_CAPTIONS = ["a white table but no red couch", "a beach but no man", "nothing nice", "a bed with no dogs", "no blue car",
                    "not bright", "a tree but no bird", "no cup"]
DISTRACTOR_IMAGES = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


# every term weighs in; C2LIP's attribute-swap negatives too (local to their image: accumulated, never gathered)
OPTIONS = {"c2lip": {"lambda_xac": 1.0, "npc_negatives": "swap_attributes"}, "hardneg": {"negatives": 2}, "negclip": {"negatives": 2},
           "svlc": {"negatives": 2}, "dac": {"mil_batch": 3}}
# a case of a method with other options: (method, options); NegCLIP with each sample's negative image, caption and its swaps
# as more samples of the batch, as its released train.py puts a neighbour's
CASES = {"negclip_images": ("negclip", {"negatives": 2, "hard_images": "negative_image"})}


def in_float64(step):
    """Run `step` with float64 as torch's default dtype: the model, the batch and every tensor a loss makes. The tests
    compare one step computed in two orders (micro-batches or the whole batch, one process or two, a plain loop or
    compclip's); in float32 the orders' rounding differs from one CPU's kernels to another's (a rank term, a relu of
    small margins of logits near 10, lost 2e-5 of itself), and in float64 it is some 1e-15 of each value, so a relative
    tolerance of 1e-5 is met on any machine and a wrong row, column or weight, which moves a term by a part of itself,
    still fails."""

    @functools.wraps(step)
    def in_float64(*args, **kwargs):
        saved = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return step(*args, **kwargs)
        finally:
            torch.set_default_dtype(saved)

    return in_float64


@in_float64
def compute(env, accum: int = 1, method_name: str = "c2lip", device: str = "cpu"):
    """Loss terms and gradients (on the CPU) of one step on `device`, in float64 (`in_float64`)."""
    from torch.nn.parallel import DistributedDataParallel

    from compclip.concepts import extract
    from compclip.methods import build_method
    from compclip.models import load_model
    from compclip.train import loss_step
    from compclip.train.trainer import _TrainModule

    torch.manual_seed(0)
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    model.to(device)
    model.train()
    method_name, options = CASES.get(method_name, (method_name, None))
    options = options or {k: v for part in method_name.split("+") for k, v in OPTIONS.get(part, {}).items()}
    records = {r["caption"]: r for r in extract(CAPTIONS + NEGATIVE_CAPTIONS, "noun-phrases,pos,graph")}
    method = build_method(method_name, concepts=records, **options).bind(model)
    if not method.uses_logit_bias:  # as the trainer does: DDP wants every trained parameter used
        model.logit_bias.requires_grad_(False)
    images = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    per = 8 // env.world_size
    rows = list(range(env.rank * per, (env.rank + 1) * per))
    size = per // accum
    micro = [
        method.collate([{"image": images[i], "caption": CAPTIONS[i], "dense_captions": DENSE[i], "negative_image": NEGATIVE_IMAGES[i],
                         "negative_caption": NEGATIVE_CAPTIONS[i], "negated_caption": NEGATED_CAPTIONS[i],
                         "distractor_image": DISTRACTOR_IMAGES[i]} for i in rows[k * size : (k + 1) * size]], tokenizer)
        for k in range(accum)
    ]
    micro = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()} for batch in micro]
    module = _TrainModule(model, method)
    if env.distributed:
        module = DistributedDataParallel(module)
    terms = loss_step(module, method, micro, env)
    trained = [*model.named_parameters(), *(("method." + n, p) for n, p in method.named_parameters())]
    return terms, {n: p.grad.cpu() for n, p in trained if p.requires_grad}


if __name__ == "__main__":
    from compclip.train import init_distributed
    from compclip.train.distributed import leave

    env = init_distributed("cpu")
    if len(sys.argv) > 2 and ":" in sys.argv[2]:
        cases = [case.split(":") for case in sys.argv[2].split(",")]
        results = {f"{accum}:{method}": compute(env, int(accum), method) for accum, method in cases}
        saved = {case: {"terms": terms, "grads": grads, "world_size": env.world_size} for case, (terms, grads) in results.items()}
    else:
        terms, grads = compute(env, *(int(sys.argv[2]), *sys.argv[3:4]) if len(sys.argv) > 2 else ())
        saved = {"terms": terms, "grads": grads, "world_size": env.world_size}
    if env.is_main:
        torch.save(saved, sys.argv[1])
    if env.joined:
        torch.distributed.barrier()  # both ranks done before either ends the group
    leave(env)
    # past the interpreter's finalisation, where gloo's threads can still hold tensors of Python objects and abort a rank
    # that finished ("terminate called without an active exception", pytorch/pytorch#179291): the results are on disk
    sys.stdout.flush()
    os._exit(0)
