"""The draft head in torch (training only): an EAGLE-style decoder layer over the target's hidden states.

Architecture (EAGLE, Li et al., arXiv 2401.15077, section 4; the output layer pruned to frequent tokens as in
FR-Spec, Zhao et al., arXiv 2502.14856):

* Position ``j`` reads the target's final hidden state ``h_j`` (the LM head's input, ``[hidden]``) and the
  embedding of token ``x_{j+1}`` (the token the target chose after it), each RMS-normalized, concatenated and
  projected back to ``hidden`` (``fc``).
* One Llama decoder layer (grouped-query self-attention with RoPE over the head's earlier positions, then a gated
  SiLU MLP, both pre-norm with residuals), with the target's head counts and RoPE base, so the head's KV cache
  rolls exactly like the target's.
* Its output, RMS-normalized (``final_norm``), is ``g_j``, which predicts ``h_{j+1}`` (a normalized state too: the
  target's final norm comes before its LM head); the logits of ``x_{j+2}`` are ``g_j . E_v`` for the rows ``E_v``
  of the target's tied embedding that belong to the draft vocabulary (``vocab``: the most frequent reply tokens).
  The same rows embed input tokens; a token outside the vocabulary gets one learned vector (``oov``).
* Drafting a second token feeds ``g_j`` back in place of ``h_{j+1}`` (training: ``forward(..., second_step=True)``
  computes that second step for every position at once, attending to the first step's keys of earlier positions
  and to its own key: EAGLE-3's "training-time test", arXiv 2503.01840, section 3.2).

The frozen table ``E_v`` is a buffer; export (``export.py``) writes it once for both uses.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class HeadConfig:
    """Shapes of a draft head (defaults: the target SmolLM2-135M's own)."""

    hidden: int = 576
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    intermediate: int = 1536
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    vocab: int = 8192  # draft vocabulary size (rows of E_v)

    def as_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE (the Hugging Face Llama layout) of ``x`` ``[B, heads, T, d]`` at ``positions`` ``[B, T]``."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
    angles = positions[:, None, :, None].float() * inv  # [B, 1, T, d/2]
    cos, sin = torch.cos(angles).repeat(1, 1, 1, 2), torch.sin(angles).repeat(1, 1, 1, 2)
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class DraftHead(nn.Module):
    """See the module docstring.

    Args:
        config: the shapes.
        table: float32 ``[config.vocab, hidden]``, the target's embedding rows of the draft vocabulary (frozen).
    """

    def __init__(self, config: HeadConfig, table: torch.Tensor):
        super().__init__()
        c = config
        self.config = c
        self.register_buffer("table", table.float(), persistent=True)
        self.oov = nn.Parameter(torch.zeros(c.hidden))
        self.hidden_norm = RMSNorm(c.hidden, c.rms_eps)
        self.token_norm = RMSNorm(c.hidden, c.rms_eps)
        self.fc = nn.Linear(2 * c.hidden, c.hidden, bias=False)
        self.attention_norm = RMSNorm(c.hidden, c.rms_eps)
        self.q = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.mlp_norm = RMSNorm(c.hidden, c.rms_eps)
        self.gate = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, c.hidden, bias=False)
        self.final_norm = RMSNorm(c.hidden, c.rms_eps)
        for layer in (self.o, self.down):  # start close to the identity on the residual stream
            nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2))

    def embed(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of draft-vocabulary indices ``[B, T]`` (index ``config.vocab`` = outside the vocabulary)."""
        return torch.cat([self.table, self.oov[None]], dim=0)[draft_ids]

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits ``[..., vocab]`` of output features ``g`` ``[..., hidden]``."""
        return g @ self.table.T

    def _input(self, h: torch.Tensor, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cat([self.hidden_norm(h), self.token_norm(self.embed(draft_ids))], dim=-1))

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        c = self.config
        b, t, _ = x.shape
        y = self.attention_norm(x)
        q = self.q(y).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k(y).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v(y).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        return rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta), v

    def _finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = attended.shape
        x = x + self.o(attended.transpose(1, 2).reshape(b, t, -1))
        y = self.mlp_norm(x)
        return self.final_norm(x + self.down(F.silu(self.gate(y)) * self.up(y)))

    def forward(
        self, h: torch.Tensor, draft_ids: torch.Tensor, positions: torch.Tensor, second_step: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output features of every position, and of every position's second drafting step.

        Args:
            h: float32 ``[B, T, hidden]``, the target's hidden states ``h_j``.
            draft_ids: int64 ``[B, T]``, draft-vocabulary index of ``x_{j+1}`` (``vocab`` = outside it).
            positions: int64 ``[B, T]``, position ids (``j``).
            second_step: also compute, at every position ``j >= 1``, the step that reads ``g_{j-1}`` instead of
                ``h_j`` and attends to the first step's positions ``< j`` and itself.

        Returns:
            ``(g, g2)``: float32 ``[B, T, hidden]`` each (``g2`` None unless ``second_step``; its position 0 is
            meaningless).
        """
        c = self.config
        groups = c.heads // c.kv_heads
        x = self._input(h, draft_ids)
        q, k, v = self._qkv(x, positions)
        k_rep, v_rep = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        g = self._finish(x, F.scaled_dot_product_attention(q, k_rep, v_rep, is_causal=True))
        if not second_step:
            return g, None
        previous = torch.cat([torch.zeros_like(g[:, :1]), g[:, :-1]], dim=1)
        x2 = self._input(previous, draft_ids)
        q2, k2, v2 = self._qkv(x2, positions)
        k2_rep, v2_rep = k2.repeat_interleave(groups, 1), v2.repeat_interleave(groups, 1)
        t = h.shape[1]
        earlier = torch.ones(t, t, dtype=torch.bool, device=h.device).tril(-1)
        itself = torch.eye(t, dtype=torch.bool, device=h.device)
        mask = torch.cat([earlier, itself], dim=1)  # [T, 2T]: step-1 keys < j, then its own key
        attended = F.scaled_dot_product_attention(
            q2, torch.cat([k_rep, k2_rep], dim=2), torch.cat([v_rep, v2_rep], dim=2), attn_mask=mask
        )
        return g, self._finish(x2, attended)
