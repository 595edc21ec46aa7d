# SPDX-License-Identifier: MIT
"""A small decoder-only transformer in torch for the kvdist examples: RMSNorm, rotary
position embeddings, grouped-query attention, a SwiGLU feed-forward, fixed-seed random weights
(nothing is downloaded), and a paged KV cache of 16-token blocks.

The KV cache is one tensor per layer for K and one for V (K0, V0, K1, V1, ...), each of shape
[num_blocks, BLOCK, kv_heads, head_dim]: exactly a kvdist blocks cache, so the tensors can live
in kvdist memory (kvdist.empty_torch()) and be registered with register_blocks_cache(). A
sequence's block table lists the blocks holding its positions 0-15, 16-31, ...

Prefill and decode are separate functions, as a disaggregated deployment runs them, and a
single-process run uses the very same two: the tokens of a run where the KV moved from one
process to another must be those of a run where it did not."""

import dataclasses
import hashlib

import torch

BLOCK = 16


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 2048
    dim: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2  # grouped-query attention: 4 query heads share each K/V head
    ffn: int = 768
    rope_theta: float = 10000.0
    seed: int = 1234

    @property
    def head_dim(self):
        return self.dim // self.heads

    def kv_shape(self, num_blocks):
        """Shape of the whole KV cache: 2 * layers tensors of num_blocks blocks."""
        return (2 * self.layers, num_blocks, BLOCK, self.kv_heads, self.head_dim)


class TinyLLM:
    def __init__(self, config=Config()):
        self.c = c = config
        g = torch.Generator().manual_seed(c.seed)

        def w(*shape):
            return torch.randn(*shape, generator=g) / shape[0] ** 0.5

        self.embed = torch.randn(c.vocab, c.dim, generator=g)
        self.layers = [dict(
            attn_norm=torch.ones(c.dim), ffn_norm=torch.ones(c.dim),
            wq=w(c.dim, c.heads * c.head_dim), wk=w(c.dim, c.kv_heads * c.head_dim),
            wv=w(c.dim, c.kv_heads * c.head_dim), wo=w(c.heads * c.head_dim, c.dim),
            w1=w(c.dim, c.ffn), w3=w(c.dim, c.ffn), w2=w(c.ffn, c.dim),
        ) for _ in range(c.layers)]
        self.norm = torch.ones(c.dim)
        self.out = w(c.dim, c.vocab)
        inv = 1.0 / c.rope_theta ** (torch.arange(0, c.head_dim, 2).float() / c.head_dim)
        self.inv_freq = inv

    @staticmethod
    def _rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    def _rope(self, x, positions):
        """Rotates x [T, heads, head_dim] by its positions."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def _attention(self, q, k, v, causal):
        """q [T, heads, d], k and v [S, kv_heads, d] -> [T, heads * d]."""
        group = self.c.heads // self.c.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / self.c.head_dim ** 0.5
        if causal:
            t, s = scores.shape[1], scores.shape[2]
            mask = torch.ones(t, s, dtype=torch.bool).triu(s - t + 1)
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.einsum("hts,shd->thd", scores.softmax(-1), v).flatten(1)

    def _ffn(self, x, p):
        h = self._rms(x, p["ffn_norm"])
        return (torch.nn.functional.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]

    def _qkv(self, x, p, positions):
        c = self.c
        h = self._rms(x, p["attn_norm"])
        q = (h @ p["wq"]).view(-1, c.heads, c.head_dim)
        k = (h @ p["wk"]).view(-1, c.kv_heads, c.head_dim)
        v = (h @ p["wv"]).view(-1, c.kv_heads, c.head_dim)
        return self._rope(q, positions), self._rope(k, positions), v

    @staticmethod
    def _slots(block_table, positions):
        table = torch.as_tensor(block_table, dtype=torch.long)
        return table[positions // BLOCK], positions % BLOCK

    def _next_token(self, x):
        return int((self._rms(x[-1], self.norm) @ self.out).argmax())

    @torch.no_grad()
    def prefill(self, tokens, kv, block_table, layer_done=None):
        """Runs the prompt, writes each layer's K and V into kv at block_table's slots and
        calls layer_done(layer) as soon as that layer's K and V are in place. Returns the
        first generated token (greedy)."""
        positions = torch.arange(len(tokens))
        blocks, offsets = self._slots(block_table, positions)
        x = self.embed[torch.as_tensor(tokens)]
        for i, p in enumerate(self.layers):
            q, k, v = self._qkv(x, p, positions)
            kv[2 * i][blocks, offsets] = k
            kv[2 * i + 1][blocks, offsets] = v
            if layer_done:
                layer_done(i)
            x = x + self._attention(q, k, v, causal=True) @ p["wo"]
            x = x + self._ffn(x, p)
        return self._next_token(x)

    @torch.no_grad()
    def decode(self, token, position, kv, block_table):
        """One step: token at position, attending to positions 0..position of the cache.
        Returns the next token."""
        pos = torch.tensor([position])
        blocks, offsets = self._slots(block_table, pos)
        used = block_table[:position // BLOCK + 1]
        x = self.embed[torch.tensor([token])]
        for i, p in enumerate(self.layers):
            q, k, v = self._qkv(x, p, pos)
            kv[2 * i][blocks, offsets] = k
            kv[2 * i + 1][blocks, offsets] = v
            keys = kv[2 * i][used].flatten(0, 1)[:position + 1]
            values = kv[2 * i + 1][used].flatten(0, 1)[:position + 1]
            x = x + self._attention(q, keys, values, causal=False) @ p["wo"]
            x = x + self._ffn(x, p)
        return self._next_token(x)

    def generate(self, first_token, length, steps, kv, block_table):
        """steps tokens after a prompt of length whose KV is in kv, starting from the first
        token prefill returned."""
        tokens = [first_token]
        while len(tokens) < steps:
            tokens.append(self.decode(tokens[-1], length + len(tokens) - 1, kv, block_table))
        return tokens

    def kv_digest(self, kv, block_table, length):
        """SHA-256 of the K and V of positions 0..length-1, layer by layer."""
        h = hashlib.sha256()
        used = block_table[:(length + BLOCK - 1) // BLOCK]
        for t in range(kv.shape[0]):
            h.update(kv[t][used].flatten(0, 1)[:length].contiguous().numpy().tobytes())
        return h.hexdigest()


def prompt_tokens(config, length, seed=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(config.vocab, (length,), generator=g).tolist()
