"""LARS updates checked against Algorithm 1 of You, Gitman & Ginsburg (2017), computed by hand."""

import math

import torch

from coursekit.train.optim.lars import LARS

LR, MOMENTUM, DECAY, ETA = 0.1, 0.9, 0.01, 0.001


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def lars_by_hand(w, grads):
    """Paper: local = eta ||w|| / (||g|| + beta ||w||); v = m v + lr local (g + beta w); w = w - v."""
    v = [0.0] * len(w)
    for g in grads:
        local = ETA * norm(w) / (norm(g) + DECAY * norm(w))
        v = [MOMENTUM * vi + LR * local * (gi + DECAY * wi) for vi, gi, wi in zip(v, g, w, strict=True)]
        w = [wi - vi for wi, vi in zip(w, v, strict=True)]
    return w


def run(param, grads, **group):
    optimizer = LARS([{"params": [param], **group}], lr=LR, momentum=MOMENTUM, trust_coefficient=ETA)
    for g in grads:
        param.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
    return param.detach().tolist()


def test_two_lars_steps_match_the_paper():
    grads = [[0.6, 0.8], [-1.0, 2.0]]
    got = run(torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True), grads, weight_decay=DECAY)
    expected = lars_by_hand([3.0, 4.0], grads)
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(got, expected, strict=True))
    # first step by hand: local lr = 0.001 * 5 / (1 + 0.01 * 5); update 0.1 * local * (g + 0.01 w)
    local = 0.005 / 1.05
    assert math.isclose(lars_by_hand([3.0, 4.0], grads[:1])[0], 3.0 - 0.1 * local * 0.63, rel_tol=1e-12)


def test_excluded_group_is_plain_momentum_sgd():
    # bias/normalisation group: no trust ratio, no decay -> v = m v + lr g
    got = run(torch.tensor([0.5], dtype=torch.float64, requires_grad=True), [[2.0], [1.0]],
              weight_decay=0.0, layer_adaptation=False)
    v1 = LR * 2.0
    v2 = MOMENTUM * v1 + LR * 1.0
    assert math.isclose(got[0], 0.5 - v1 - v2, rel_tol=1e-12)


def test_zero_weights_use_trust_ratio_one():
    got = run(torch.zeros(2, dtype=torch.float64, requires_grad=True), [[1.0, -1.0]], weight_decay=DECAY)
    assert got == [-LR * 1.0, LR * 1.0]
