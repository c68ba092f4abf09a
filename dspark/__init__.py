"""DSpark Studio's library: speculative decoding with block drafters on MLX (no Qt here)."""

from .drafter import DflashConfig, DflashDrafter, DraftOpts, DraftRows, TrainOut, default_taps
from .engine import GenerationConfig, generate, generate_baseline, run_to_summary
from .errors import DrafterMismatchError, DsparkError, NotGemma4Error
from .events import CommittedToken, RoundEvent, Source, Summary
from .sampling import SamplingParams
from .target import DraftProjection, Target, TargetDims, load_target

__version__ = "0.1.0"

__all__ = [
    "CommittedToken",
    "DflashConfig",
    "DflashDrafter",
    "DraftOpts",
    "DraftProjection",
    "DraftRows",
    "DrafterMismatchError",
    "DsparkError",
    "GenerationConfig",
    "NotGemma4Error",
    "RoundEvent",
    "SamplingParams",
    "Source",
    "Summary",
    "Target",
    "TargetDims",
    "TrainOut",
    "default_taps",
    "generate",
    "generate_baseline",
    "load_target",
    "run_to_summary",
]
