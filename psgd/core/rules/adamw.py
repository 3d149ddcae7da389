"""AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW."""
from __future__ import annotations

import torch

from psgd.core.rules.adam import Adam
from psgd.core.rules.base import rule


@rule
class AdamW(Adam):
    name = "adamw"
    torch_class = torch.optim.AdamW
    decoupled_weight_decay = True
