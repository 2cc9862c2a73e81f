"""Strict, finite, bounded field types for the spec, and the bounds with their sources.

Strict: an int field refuses `true`, `1.5` and `"4096"` (a coercion there would hide an
error: `n_layers: yes` once became a 1-layer model). Floats accept ints, refuse booleans and
strings, and are finite (`allow_inf_nan=False`: JSON has no Infinity, and torch would get one).
`docs/limits.md` lists every bound below with its source; `bsm schema` shows them.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge, Gt, Le, Lt
from pydantic import AllowInfNan, Strict

Int = Annotated[int, Strict()]
PosInt = Annotated[int, Strict(), Gt(0)]
NonNegInt = Annotated[int, Strict(), Ge(0)]
Float = Annotated[float, Strict(), AllowInfNan(False)]
PosFloat = Annotated[float, Strict(), AllowInfNan(False), Gt(0)]
NonNegFloat = Annotated[float, Strict(), AllowInfNan(False), Ge(0)]
Bool = Annotated[bool, Strict()]

# -- bounds, each with where it comes from ------------------------------------------------------
SEED_MAX = 2**32 - 1  # numpy.random.seed / RandomState: seed must be in [0, 2**32 - 1]
FLOAT64_EXACT = 2**53  # the planner multiplies token counts in float64: exact below 2**53
INT32_MAX = 2**31 - 1  # step counters and shapes that torch keeps in int32 kernels
MAX_LAYERS = 1024  # toolkit bound: 80 blocks is the largest preset; keeps counts finite
MAX_WIDTH = 2**17  # toolkit bound on d_model / ffn_dim (131,072; llama-3.1-405b uses 53,248)
MAX_HEADS = 1024  # toolkit bound (llama-3.1-405b: 128)
MAX_VOCAB = 2**32  # token shards store ids as uint16 or uint32 (blackwell_sm.train.data)
MAX_SEQ = 2**24  # toolkit bound: 16 Mi tokens, 128x the longest preset context
MAX_INSTANCES = 1024  # toolkit bound: the planner's models are not validated past 1024 nodes
MAX_GPUS = MAX_INSTANCES * 8  # shard / replicate degrees cannot exceed the GPUs of the run
MAX_PIN = 2**20  # toolkit bound on micro-batch and accumulation pins
LR_MAX = 1.0  # toolkit bound; torch.optim.AdamW itself requires 0 <= lr

SeedInt = Annotated[int, Strict(), Ge(0), Le(SEED_MAX)]
TokenCount = Annotated[int, Strict(), Gt(0), Le(FLOAT64_EXACT)]
StepCount = Annotated[int, Strict(), Gt(0), Le(INT32_MAX)]
NonNegStepCount = Annotated[int, Strict(), Ge(0), Le(INT32_MAX)]
Beta = Annotated[float, Strict(), AllowInfNan(False), Ge(0), Lt(1)]


class KeyedValueError(ValueError):
    """A validation error about one entry of a mapping field, or about one field below the
    model whose validator raised it (`key` may be dotted: `schedule.warmup_steps`); the spec
    path gets `.KEY`, so the error names the field, never only its parent."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key
