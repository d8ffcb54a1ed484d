"""A small GPT (pre-LayerNorm decoder) whose parts the parallel strategies can cut.

``GPT(vocab_size, seq_len, dim, heads, layers)`` maps token ids ``(batch, seq_len)`` to logits
``(batch, seq_len, vocab_size)``. The blocks live in a ``ModuleDict`` keyed "0", "1", ...: a pipeline
stage keeps some of them under their original names (state-dict keys stay those of the whole model), and
a stage without the embedding takes activations as input, one without the head returns them.

Tensor parallelism (Megatron): q, k, v and ``fc1`` are split by columns (output features: whole heads,
whole hidden units per rank), ``o`` and ``fc2`` by rows; one all-reduce after each. The attention reads its
number of local heads from the width it receives, so the same code runs on a full or a split block.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

MLP_RATIO = 4


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        # no biases in q, k, v (as in LLaMA): a key bias has zero gradient (softmax ignores a constant shift), and
        # Adam turns its rounding noise into full-size steps, so equal-to-serial checks would see noise
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.o = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = (proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
                   for proj in (self.q, self.k, self.v))  # (batch, local heads, length, head_dim)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, MLP_RATIO * dim), nn.Linear(MLP_RATIO * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x)): the unit of checkpointing, FSDP and pipeline cuts."""

    checkpoint_unit = True

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = nn.LayerNorm(dim), Attention(dim, heads), nn.LayerNorm(dim), MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, seq_len: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"gpt_heads={heads} does not divide gpt_dim={dim}")
        self.tok: nn.Module | None = nn.Embedding(vocab_size, dim)
        self.pos: nn.Module | None = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleDict({str(i): Block(dim, heads) for i in range(layers)})
        self.norm: nn.Module | None = nn.LayerNorm(dim)
        self.head: nn.Module | None = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.tok(x) + self.pos(positions)
        for block in self.blocks.values():
            x = block(x)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def split_gpt(model: GPT, stages: int) -> list[GPT]:
    """``stages`` GPTs sharing ``model``'s modules: equal runs of blocks, the embedding on the first stage,
    the final norm and head on the last. Each keeps the original state-dict keys."""
    names = list(model.blocks.keys())
    if len(names) % stages:
        raise ValueError(f"gpt_layers={len(names)} is not divisible by the {stages} pipeline stages (pp)")
    per_stage = len(names) // stages
    parts = []
    for index in range(stages):
        part = copy.copy(model)  # a new Module object whose child dicts are replaced below
        part._modules = dict(model._modules)
        part._parameters, part._buffers = dict(model._parameters), dict(model._buffers)
        part.blocks = nn.ModuleDict({n: model.blocks[n] for n in names[index * per_stage:(index + 1) * per_stage]})
        if index > 0:
            part.tok = part.pos = None
        if index < stages - 1:
            part.norm = part.head = None
        parts.append(part)
    return parts


def block_tp_plan() -> dict[str, object]:
    """The Megatron plan of one block, names relative to the block: column-wise in, row-wise out."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(), "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}
