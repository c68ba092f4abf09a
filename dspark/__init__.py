"""DSpark Studio's library: speculative decoding with block drafters on MLX (no Qt here).

Names are imported lazily (PEP 562), so ``import dspark.events`` or ``dspark.metrics`` — all a
GUI thread needs — does not load MLX.
"""

from importlib import import_module

from .version import __version__ as __version__  # the public version, dspark.__version__

_WHERE = {
    "DflashConfig": "drafter",
    "DflashDrafter": "drafter",
    "DraftOpts": "drafting",
    "DraftRows": "drafting",
    "TrainOut": "drafter",
    "default_taps": "drafter",
    "GenerationConfig": "config",
    "generate": "engine",
    "generate_plain": "engine",
    "generate_baseline": "engine",  # generate_plain's old name, kept for users' code
    "run_to_summary": "engine",
    "DrafterMismatchError": "errors",
    "DsparkError": "errors",
    "NotGemma4Error": "errors",
    "Figures": "metrics",
    "summarize": "metrics",
    "CommittedToken": "events",
    "RoundEvent": "events",
    "Source": "events",
    "Summary": "events",
    "SamplingParams": "config",
    "DraftProjection": "target",
    "Target": "target",
    "TargetDims": "target",
    "load_drafter": "loading",
    "load_target": "loading",
    "TrainSettings": "training.trainer",
    "train_drafter": "training.train",
}

__all__ = sorted(_WHERE)

# DSPARK_DEVICE (dspark.device) must pick MLX's device before mlx-lm is imported: mlx_lm.generate
# makes its generation stream on the default device of that moment. MLX is imported here only
# when the variable is set, after the fast BLAS (on Linux, the entry points' OpenBLAS would
# otherwise come too late); a wrong value is reported, in one sentence, when a model is loaded.
if __import__("os").environ.get("DSPARK_DEVICE"):
    from .blas import use_fast_blas as _use_fast_blas
    from .device import use_env_device as _use_env_device
    from .errors import DsparkError as _DsparkError

    _use_fast_blas()  # first: OpenBLAS must be in the process before mlx is (dspark.blas)

    try:
        _use_env_device()
    except _DsparkError:
        pass


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dspark' has no attribute {name!r}")


def __dir__():
    return __all__ + ["__version__"]
