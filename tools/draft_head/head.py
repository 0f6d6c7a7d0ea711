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
  and to its own key: EAGLE-3's "training-time test", arXiv 2503.01840, section 3.2); ``unroll`` does the same for
  any number of steps (a third step reads the second's output and attends to the first step's keys up to its chain's
  start, the second step's key of its chain and its own).
* Fused features (``HeadConfig.fused`` > 0; EAGLE-3, section 3.3): the outputs of some of the target's lower decoder
  layers, each RMS-normalized, are projected (``fuse``) and added to the normalized ``h_j`` before ``fc``. ``fuse``
  starts at zero, so a fused head begins as the plain head it is initialized from (``import_ir``). Drafting steps
  after the first have no target features: they read ``g`` in place of ``h`` and zeros in place of the layers
  (whose RMSNorm is then zero), as the exported graph is fed.

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
    fused: int = 0  # target decoder-layer outputs fused into the input (EAGLE-3), 0: the final hidden state only

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
        if c.fused:
            self.layer_norms = nn.ModuleList([RMSNorm(c.hidden, c.rms_eps) for _ in range(c.fused)])
            self.fuse = nn.Linear(c.fused * c.hidden, c.hidden, bias=False)
            nn.init.zeros_(self.fuse.weight)  # begins as the head without fusion
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

    def _input(self, h: torch.Tensor, draft_ids: torch.Tensor, layers: torch.Tensor | None = None) -> torch.Tensor:
        feature = self.hidden_norm(h)
        if layers is not None and self.config.fused:
            normed = [norm(layers[..., i, :]) for i, norm in enumerate(self.layer_norms)]
            feature = feature + self.fuse(torch.cat(normed, dim=-1))
        return self.fc(torch.cat([feature, self.token_norm(self.embed(draft_ids))], dim=-1))

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
        self, h: torch.Tensor, draft_ids: torch.Tensor, positions: torch.Tensor, second_step: bool = False,
        layers: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output features of every position, and of every position's second drafting step.

        Args:
            h: float32 ``[B, T, hidden]``, the target's hidden states ``h_j``.
            draft_ids: int64 ``[B, T]``, draft-vocabulary index of ``x_{j+1}`` (``vocab`` = outside it).
            positions: int64 ``[B, T]``, position ids (``j``).
            second_step: also compute, at every position ``j >= 1``, the step that reads ``g_{j-1}`` instead of
                ``h_j`` and attends to the first step's positions ``< j`` and itself.
            layers: float32 ``[B, T, fused, hidden]``, the target's fused layer outputs (None: without).

        Returns:
            ``(g, g2)``: float32 ``[B, T, hidden]`` each (``g2`` None unless ``second_step``; its position 0 is
            meaningless).
        """
        features = self.unroll(h, draft_ids, positions, 2 if second_step else 1, layers)
        return features[0], (features[1] if second_step else None)

    def unroll(
        self, h: torch.Tensor, draft_ids: torch.Tensor, positions: torch.Tensor, steps: int,
        layers: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """Output features of ``steps`` drafting steps at every position at once (the training-time test).

        Step ``s`` (1-based) at position ``j`` continues a chain whose first step ran at ``j - s + 1``: it reads step
        ``s - 1``'s output at ``j - 1`` in place of ``h_j`` (no layer features) and the token ``x_{j+1}``, and
        attends to the first step's keys at positions ``<= j - s + 1``, to step ``r``'s key at ``j - s + r`` for
        ``1 < r < s``, and to its own key; it predicts ``x_{j+2}`` like every step at ``j``. Positions ``j < s - 1``
        of step ``s`` are meaningless.

        Args:
            h, draft_ids, positions, layers: as for ``forward``.
            steps: drafting steps, >= 1.

        Returns:
            ``steps`` float32 ``[B, T, hidden]`` tensors, step 1's first.
        """
        c = self.config
        groups = c.heads // c.kv_heads
        x = self._input(h, draft_ids, layers)
        q, k, v = self._qkv(x, positions)
        keys, values = [k.repeat_interleave(groups, 1)], [v.repeat_interleave(groups, 1)]
        outputs = [self._finish(x, F.scaled_dot_product_attention(q, keys[0], values[0], is_causal=True))]
        t = h.shape[1]
        ones = torch.ones(t, t, dtype=torch.bool, device=h.device)
        for step in range(2, steps + 1):
            previous = torch.cat([torch.zeros_like(outputs[-1][:, :1]), outputs[-1][:, :-1]], dim=1)
            x = self._input(previous, draft_ids)
            q, k, v = self._qkv(x, positions)
            keys.append(k.repeat_interleave(groups, 1))
            values.append(v.repeat_interleave(groups, 1))
            # [T, step * T]: step-1 keys <= j - step + 1, then step r's key at j - step + r
            mask = torch.cat([ones.tril(1 - step)] + [ones.tril(r - step) & ones.triu(r - step)
                                                      for r in range(2, step + 1)], dim=1)
            attended = F.scaled_dot_product_attention(q, torch.cat(keys, dim=2), torch.cat(values, dim=2),
                                                      attn_mask=mask)
            outputs.append(self._finish(x, attended))
        return outputs
