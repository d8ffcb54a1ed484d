"""LAMB updates checked against Algorithm 2 of You et al. (2019), computed by hand."""

import math

import torch

from coursekit.train.optim.lamb import LAMB

LR, BETA1, BETA2, EPS, DECAY = 0.01, 0.9, 0.999, 1e-6, 0.1


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def lamb_by_hand(w, grads, decay=DECAY, adapt=True):
    """m, v moments; bias-corrected r = m_hat / (sqrt(v_hat) + eps); u = r + lam w;
    w = w - lr * ||w|| / ||u|| * u (ratio 1 when not adapting)."""
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        m = [BETA1 * mi + (1 - BETA1) * gi for mi, gi in zip(m, g, strict=True)]
        v = [BETA2 * vi + (1 - BETA2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        u = [(mi / (1 - BETA1**t)) / (math.sqrt(vi / (1 - BETA2**t)) + EPS) + decay * wi
             for mi, vi, wi in zip(m, v, w, strict=True)]
        ratio = norm(w) / norm(u) if adapt else 1.0
        w = [wi - LR * ratio * ui for wi, ui in zip(w, u, strict=True)]
    return w


def run(param, grads, **group):
    optimizer = LAMB([{"params": [param], **group}], lr=LR, betas=(BETA1, BETA2), eps=EPS)
    for g in grads:
        param.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
    return param.detach().tolist()


def test_two_lamb_steps_match_the_paper():
    grads = [[0.5, 0.5], [-1.0, 0.25]]
    got = run(torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True), grads, weight_decay=DECAY)
    expected = lamb_by_hand([1.0, -2.0], grads)
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(got, expected, strict=True))
    # first step by hand: r = g / |g| ~ [1, 1]; u = [1.1, 0.8]; ratio = sqrt(5) / sqrt(1.85)
    r = 0.5 / (0.5 + EPS)
    u = [r + 0.1, r - 0.2]
    first = [1.0 - LR * math.sqrt(5) / norm(u) * u[0], -2.0 - LR * math.sqrt(5) / norm(u) * u[1]]
    assert all(math.isclose(a, b, rel_tol=1e-12)
               for a, b in zip(lamb_by_hand([1.0, -2.0], grads[:1]), first, strict=True))


def test_excluded_group_is_adam_without_decay():
    grads = [[2.0], [-1.0]]
    got = run(torch.tensor([0.5], dtype=torch.float64, requires_grad=True), grads,
              weight_decay=0.0, layer_adaptation=False)
    expected = lamb_by_hand([0.5], grads, decay=0.0, adapt=False)
    assert math.isclose(got[0], expected[0], rel_tol=1e-12)
    # by hand: step 1 m_hat = 2, v_hat = 4; step 2 m = 0.08, v = 0.004996, corrected by 0.19 and 0.001999
    step2 = (0.08 / 0.19) / (math.sqrt(0.004996 / 0.001999) + EPS)
    assert math.isclose(got[0], 0.5 - LR * 2.0 / (2.0 + EPS) - LR * step2, rel_tol=1e-9)
