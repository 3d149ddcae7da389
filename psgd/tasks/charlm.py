"""A character-level language model on text that ships with Python: the
`pydoc_data.topics` help pages (about 0.46 M characters on CPython 3.12), so
nothing is downloaded. Its metric is validation loss (nats per character).

The text is mapped onto a fixed vocabulary (printable ASCII, newline and one
"other" symbol), so token ids do not depend on which characters a Python
version's help text happens to contain. It is cut into windows of
`context + 1` characters; every `val_every`-th window is held out, so both
splits cover every topic. A sample is (x = window[:-1], y = window[1:]), and
the model returns logits shaped (batch, vocab, context), the layout
`cross_entropy` expects for sequences.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["VOCAB", "encode", "charlm_dataset", "CharTransformer", "corpus"]

VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))   # id len(VOCAB) is "any other character"
_INDEX = {ch: i for i, ch in enumerate(VOCAB)}
OTHER = len(VOCAB)
VOCAB_SIZE = len(VOCAB) + 1


def corpus() -> str:
    from pydoc_data.topics import topics
    return "".join(topics[k] for k in sorted(topics))


def encode(text: str) -> torch.Tensor:
    return torch.tensor([_INDEX.get(ch, OTHER) for ch in text], dtype=torch.int64)


def charlm_dataset(context: int = 64, val_every: int = 10, max_chars: int = 0, val_windows: int = 0, **_):
    """((x_train, y_train), (x_val, y_val)): int64 tensors of shape (N, context).
    `val_windows` > 0 keeps only that many held-out windows (spread over the
    whole text), so an evaluation stays fast enough to evaluate often."""
    if context < 2:
        raise ValueError(f"charlm: context must be >= 2, got {context}")
    if val_every < 2:
        raise ValueError(f"charlm: val_every must be >= 2, got {val_every}")
    ids = encode(corpus())
    if max_chars:
        ids = ids[:max_chars]
    n = len(ids) // (context + 1)
    if n < val_every:
        raise ValueError(f"charlm: the text gives only {n} windows of {context + 1} characters")
    windows = ids[:n * (context + 1)].view(n, context + 1)
    val = torch.zeros(n, dtype=torch.bool)
    val[val_every - 1::val_every] = True
    train, held = windows[~val], windows[val]
    if 0 < val_windows < len(held):
        held = held[torch.linspace(0, len(held) - 1, val_windows).long()]
    return (train[:, :-1], train[:, 1:]), (held[:, :-1], held[:, 1:])


class CharTransformer(nn.Module):
    """A small causal transformer (pre-norm encoder layers with a causal mask)."""

    def __init__(self, in_features: int, num_outputs: int = VOCAB_SIZE, d_model: int = 64, heads: int = 4,
                 layers: int = 2, vocab: int = VOCAB_SIZE):
        super().__init__()
        self.context = in_features
        self.vocab = max(vocab, num_outputs)
        self.embed = nn.Embedding(self.vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, in_features, d_model))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, self.vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(in_features), persistent=False)

    def forward(self, x):
        ids = x.long()   # tasks hand inputs over as float; ids are exact in float32
        t = ids.shape[1]
        h = self.embed(ids) + self.pos[:, :t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h)).transpose(1, 2)   # (batch, vocab, context)
