"""xac_loss against a per-phrase Python loop like the released C2LIP code's.

The loop attends every image with one phrase at a time (B×M×D matrix-vector work per
phrase); compclip's xac_loss scores all phrases at once with matrix products and gets the
pooled norm from the token Gram matrix. Same values asserted; forward + backward timed.
Target, B = 64, 256 concepts, ViT-B/16 tokens (M = 196, D = 768), CPU: >= 10x.

Run: .venv/bin/python benchmarks/xac_vs_loop.py
"""
import math
import statistics
import time

import torch
import torch.nn.functional as F

from compclip.methods.c2lip import xac_loss

B, M, D, K = 64, 196, 768, 256


def per_phrase_loop(tokens, concepts, owner, scale, bias):
    """One phrase at a time, as the released code does it."""
    total = tokens.new_zeros(())
    for j in range(concepts.shape[0]):
        attn = torch.softmax(tokens @ concepts[j] / math.sqrt(D), dim=-1)  # (B, M)
        pooled = F.normalize((attn.unsqueeze(-1) * tokens).sum(1), dim=-1)  # (B, D)
        z = torch.where(torch.arange(B) == owner[j], 1.0, -1.0)
        total = total - F.logsigmoid(z * (scale * pooled @ concepts[j] + bias)).sum()
    return total / concepts.shape[0]


def timed(fn, tokens, concepts, *args, repeats=5):
    times, value = [], None
    for _ in range(repeats):
        t, c = tokens.detach().requires_grad_(), concepts.detach().requires_grad_()
        start = time.perf_counter()
        value = fn(t, c, *args)
        value.backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value.item(), t.grad, c.grad


def main():
    torch.manual_seed(0)
    tokens = torch.randn(B, M, D)
    concepts = F.normalize(torch.randn(K, D), dim=-1)
    owner = torch.randint(0, B, (K,))
    scale, bias = torch.tensor(10.0), torch.tensor(-10.0)
    ours = timed(xac_loss, tokens, concepts, owner, scale, bias)
    loop = timed(per_phrase_loop, tokens, concepts, owner, scale, bias)
    assert math.isclose(ours[1], loop[1], rel_tol=1e-5), (ours[1], loop[1])
    assert torch.allclose(ours[2], loop[2], rtol=1e-3, atol=1e-7) and torch.allclose(ours[3], loop[3], rtol=1e-3, atol=1e-7)
    print(f"B={B} M={M} D={D} concepts={K}, forward+backward, median of 5, {torch.get_num_threads()} threads")
    print(f"per-phrase loop {loop[0] * 1e3:8.1f} ms   loss {loop[1]:.6f}")
    print(f"xac_loss        {ours[0] * 1e3:8.1f} ms   loss {ours[1]:.6f}")
    print(f"speed-up        {loop[0] / ours[0]:8.1f}x")


if __name__ == "__main__":
    main()
