"""OC-CLIP's loss at the size users train: what autograd keeps for the backward pass, against the loss written plainly.

    python benchmarks/occlip_memory.py [--batch 256] [--device cpu|cuda] [--precision amp_bf16|fp32]

The loss alone (`OCCLIPLoss`: every image against every graph of the batch, then L_rel), at ViT-B-16's shapes: 197
patch tokens of 512 dimensions per image, the graphs of the first `--batch` shipped Flickr8k captions (spaCy's, as
`compclip concepts --what graph` makes them), node and relation embeddings drawn at random. Beside it the same module
written plainly, as `BindingModule` was until 2026-11-27: the slots divided by their weights' sum after the values are
weighted, and the norms and cosines as torch writes them (under CUDA's autocast float32 operations, which keep a float32
copy of their input). Both give the same loss (asserted; f_s and f_o take their inputs in two halves in both). The
script prints the bytes each keeps for the backward pass (every tensor autograd saves, counted once: `c2lip_overhead.kept_mib`) and, on a
GPU, the peak memory of its forward and backward (`torch.cuda.max_memory_allocated` over what was allocated before).
CPU autocast keeps other dtypes than CUDA's (softmax, norms and cosines stay bfloat16 there), so a CPU figure under
amp_bf16 is the CPU's, not a GPU's.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from c2lip_overhead import kept_mib  # this folder's
from compclip.concepts import extract
from compclip.methods import build_method
from compclip.methods.occlip import BindingModule, _halves
from train_vs_open_clip_train import first_captions  # this folder's: the shards' captions

PATCHES, WIDTH = 197, 512  # ViT-B-16 at 224 px: its patch tokens, in the joint embedding


class PlainBinding(BindingModule):
    """`BindingModule` as first written: the same formulas, every intermediate kept as autograd keeps it."""

    def slots(self, tokens, nodes, node_mask, own=False):
        attn, values = self.attention(tokens, nodes, node_mask, own)
        weighted = torch.einsum("bgqp,bgpd->bgqd" if own else "bgqp,bpd->bgqd", attn, values)
        return weighted / attn.sum(-1, keepdim=True).clamp_min(1e-8)

    def score(self, slots, nodes, node_mask, relations, ends, edge_mask):
        norms = (slots.norm(dim=-1) * nodes.norm(dim=-1)).clamp_min(1e-8)
        node_term = ((slots * nodes).sum(-1) / norms * node_mask).sum(-1)
        graph, edge = edge_mask.nonzero(as_tuple=True)
        rel, (subject, obj) = relations[graph, edge], ends[graph, edge].T
        predicted = _halves(self.f_s, rel, slots[:, graph, subject]) + _halves(self.f_o, rel, slots[:, graph, obj])
        rel_term = node_term.new_zeros(node_term.shape).index_add_(1, graph, F.cosine_similarity(rel[None], predicted, dim=-1))
        alpha, beta = self.log_alpha.exp(), self.log_beta.exp()
        count = alpha * node_mask.sum(-1) + beta * edge_mask.sum(-1)
        return (alpha * node_term + beta * rel_term) / count.clamp_min(1e-8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="amp_bf16", choices=("amp_bf16", "fp32"))
    args = parser.parse_args()
    device = torch.device(args.device)
    captions = list(first_captions().values())[: args.batch]  # each shipped photo's first caption
    records = dict(zip(captions, extract(captions, "graph"), strict=True))
    method = build_method("occlip", concepts=records)
    batch = method.collate([{"image": torch.zeros(3, 1, 1), "caption": c} for c in captions], lambda texts: torch.zeros(len(texts), 1))
    loss_module = method.parts[0].loss
    torch.manual_seed(0)
    texts = F.normalize(torch.randn(len(batch["graph_text"]), WIDTH, device=device), dim=-1).requires_grad_()  # the text tower's
    tokens = torch.randn(args.batch, PATCHES, WIDTH, device=device, requires_grad=True)
    pooled = torch.randn(args.batch, WIDTH, device=device, requires_grad=True)

    def inputs() -> dict:
        """The loss's inputs, the node and relation rows drawn from `texts` anew: each run backpropagates its own graph."""
        on = {k: batch[k].to(device) for k in ("node_text", "node_image", "relation_text", "relation_image", "relation_ends")}
        return {"visual_tokens": tokens, "image_features": pooled, "node_features": texts[on["node_text"]], "node_image": on["node_image"],
                "relation_features": texts[on["relation_text"]], "relation_image": on["relation_image"],
                "relation_ends": on["relation_ends"], "logit_scale": torch.tensor(100.0, device=device)}

    ours = BindingModule(WIDTH, 1).to(device)
    plain = PlainBinding(WIDTH, 1).to(device)
    plain.load_state_dict(ours.state_dict())
    print(f"{args.batch} images against {args.batch} graphs ({len(batch['node_text'])} nodes, {len(batch['relation_text'])} "
          f"relations, at most {int(torch.bincount(batch['node_image']).max())} nodes a graph), {PATCHES} x {WIDTH} patch tokens, "
          f"{args.precision}, {device}")
    values = {}
    for name, binding in (("plain", plain), ("compclip", ours)):
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        start = time.perf_counter()
        with torch.autocast(device.type, torch.bfloat16, enabled=args.precision == "amp_bf16"):
            terms, kept = kept_mib(lambda binding=binding: loss_module(binding, **inputs()))
        loss = sum(terms.values())
        loss.backward()
        peak = f", peak {(torch.cuda.max_memory_allocated() - before) / 2**20:,.0f} MiB" if device.type == "cuda" else ""
        if device.type == "cuda":
            torch.cuda.synchronize()
        values[name] = float(loss.detach())
        print(f"  {name:9s} kept for backward {kept:8,.0f} MiB{peak}, forward and backward {time.perf_counter() - start:.2f} s, "
              f"loss {values[name]:.5f}")
        del terms, loss
    torch.testing.assert_close(values["compclip"], values["plain"], rtol=2e-2 if args.precision == "amp_bf16" else 1e-5, atol=0)


if __name__ == "__main__":
    main()
