"""Reading a model directory, before anything of it is loaded: its config.json, whether it asks to
run code, what kind of directory it is (a target or which drafter format), its safetensors
headers (sizes without reading a tensor), and whether it fits in memory.

The bottom of the loading layer: it imports nothing of dspark but ``errors`` and ``files``, so the
target loader, every drafter format and the writers build on it without reaching into each other.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

from .errors import DsparkError

#: A file larger than this is not a config.json (a crafted one could be gigabytes).
MAX_CONFIG_BYTES = 16 * 2**20
#: A safetensors JSON header larger than this is not a checkpoint.
MAX_HEADER_BYTES = 100 * 2**20
#: Weights mlx-lm's Gemma-4 loader throws away (vision and audio towers).
TOWER_PREFIXES = ("vision_tower", "multi_modal_projector", "audio_tower", "embed_audio", "embed_vision",
                  "vision_embedder")
#: Weight files that can run code when loaded: never read.
PICKLES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
#: Above this share of the memory a model must fit in, a load is refused; above WARN_SHARE warned about.
REFUSE_SHARE, WARN_SHARE = 0.90, 0.70
#: The drafter formats this version reads (``dspark.formats``), by the name ``drafter_format`` gives.
DRAFTER_FORMATS = ("dspark-drafter", "zlab-dflash", "deepspec", "speculators")


# --------------------------------------------------------------------------- config.json
def read_config(directory: Path, what: str, name: str = "config.json") -> dict:
    """``directory/name`` as a dict, or a DsparkError saying what is wrong with it. Only a
    regular file is opened (a FIFO would block forever)."""
    path = directory / name
    if not path.is_file():
        raise DsparkError(f"{directory} has no {name}: not {what} directory")
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise DsparkError(f"{path} is {path.stat().st_size / 2**20:.0f} MiB, too large for a config file")
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DsparkError(f"{path} is not valid JSON ({e})") from None
    except OSError as e:
        raise DsparkError(f"cannot read {path} ({e.strerror or e})") from None
    if not isinstance(config, dict):
        raise DsparkError(f"{path} does not hold a JSON object")
    return config


def refuse_code(directory: Path, config: dict) -> None:
    """One sentence if ``directory`` asks to run code or ships only pickled weights."""
    code = sorted(p.name for p in directory.glob("*.py"))
    if "auto_map" in config or code:
        what = f"Python files ({', '.join(code[:3])})" if code else "custom code (auto_map in config.json)"
        raise DsparkError(f"{directory} asks to run {what}; dspark never runs code from a checkpoint: "
                          f"use a directory with config.json and .safetensors weights only")
    if not safetensors_files(directory) and any(directory.glob(f"*{s}") for s in PICKLES):
        raise DsparkError(f"{directory} holds pickled weights, which can run code when loaded: dspark reads "
                          f".safetensors only")


# --------------------------------------------------------------------------- what kind of directory
def drafter_format(config: dict) -> str | None:
    """The drafter format a config.json is written in (one of ``DRAFTER_FORMATS``), None when it
    is not a drafter's; DsparkError for a drafter kind this version does not run."""
    arch = " ".join(a for a in (config.get("architectures") or []) if isinstance(a, str))
    if config.get("format") == "dspark-drafter":
        return "dspark-drafter"
    if "speculators_config" in config or "speculators_model_type" in config:
        return "speculators"
    if "DSparkModel" in arch or ("markov_rank" in config and "target_layer_ids" in config and "dflash_config" not in config):
        return "deepspec"
    if "DFlash2" in arch:
        raise DsparkError("this is a DFlash 2 drafter (conv kernels and a candidate selector), which dspark does "
                          "not run yet")
    if "dflash_config" in config or "DFlashDraftModel" in arch:
        return "zlab-dflash"
    return None


def not_a_drafter(config: dict) -> DsparkError:
    """The sentence for a config.json that ``drafter_format`` does not know."""
    if "model_type" in config and "hidden_size" in config:
        return DsparkError(f"this directory holds a model (model type {config.get('model_type')!r}), not a drafter: "
                           f"give it as --target")
    return DsparkError("config.json is not a drafter this version knows (dspark, z-lab DFlash, DeepSpec DSpark or "
                       "vLLM speculators)")


def kind_of(config: dict) -> str:
    """"drafter" or "target": what a directory with this config.json holds (a drafter kind this
    version refuses is still a drafter)."""
    arch = " ".join(a for a in (config.get("architectures") or []) if isinstance(a, str))
    drafter_keys = ("dflash_config", "speculators_config", "target_layer_ids", "format")
    return "drafter" if "DSpark" in arch or "DFlash" in arch or any(k in config for k in drafter_keys) else "target"


# --------------------------------------------------------------------------- safetensors headers
def safetensors_files(directory: Path) -> list[Path]:
    """A directory's ``*.safetensors`` files, sorted, without hidden ones: a process killed while
    writing leaves ``.<name>.<pid>.tmp.safetensors`` (``dspark.files.atomic_write``), which is
    not part of the checkpoint (pathlib's glob, unlike a shell's, matches dot files)."""
    return sorted(f for f in Path(directory).glob("*.safetensors") if not f.name.startswith("."))


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file, without reading its tensors."""
    if not path.is_file():
        raise DsparkError(f"{path} is not a regular file")
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise DsparkError(f"{path} is not a safetensors file (too short)")
            n = struct.unpack("<Q", raw)[0]
            if n > MAX_HEADER_BYTES or n > path.stat().st_size - 8:
                raise DsparkError(f"{path} is not a readable safetensors file (header length {n})")
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DsparkError(f"{path} is not a readable safetensors file ({e})") from None
    if not isinstance(header, dict):
        raise DsparkError(f"{path} is not a readable safetensors file (its header is not an object)")
    return header


def tensor_bytes(directory: Path, skip=TOWER_PREFIXES) -> int:
    """Bytes of the tensors a loader keeps (the towers' are skipped), from the headers."""
    total = 0
    for f in safetensors_files(directory):
        for name, info in read_header(f).items():
            if name == "__metadata__" or name.removeprefix("model.").startswith(skip):
                continue
            try:
                begin, end = info["data_offsets"]
                total += int(end) - int(begin)
            except (KeyError, TypeError, ValueError):
                raise DsparkError(f"{f}: tensor {name} has no valid data offsets") from None
    return total


# --------------------------------------------------------------------------- memory
def machine_memory() -> int | None:
    """Physical memory in bytes (None when the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def loaded_bytes() -> int:
    """Memory MLX holds now (the models already loaded)."""
    import mlx.core as mx

    return int(mx.get_active_memory())


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GB"


def metal_working_set() -> int | None:
    """Metal's recommended working set in bytes, when MLX computes on a Mac's GPU (None elsewhere).
    MLX's buffers live in memory the GPU must keep resident; beyond this size macOS pages them and
    generation slows to a crawl, which is why mlx-lm warns against it (``wired_limit`` in
    ``mlx_lm/generate.py`` reads the same ``max_recommended_working_set_size``)."""
    if sys.platform != "darwin":
        return None
    try:
        import mlx.core as mx

        if mx.default_device().type != mx.gpu:
            return None
        return int(mx.device_info().get("max_recommended_working_set_size") or 0) or None
    except (AttributeError, ImportError, RuntimeError, ValueError):
        return None


def memory_budget() -> tuple[int, str] | None:
    """What the models must fit in, in bytes, and how to name it in a sentence: Metal's recommended
    working set on a Mac computing on its GPU, else the machine's physical memory."""
    metal = metal_working_set()
    if metal:
        return metal, f"Metal's recommended working set on this Mac is {gib(metal)}"
    total = machine_memory()
    return (total, f"this machine has {gib(total)} in all") if total else None


def check_fits(what: str, needed: int, already: int = 0, say=None) -> None:
    """Refuse (DsparkError) or warn (``say``) before loading ``needed`` bytes on top of
    ``already`` loaded ones, against :func:`memory_budget`. ``DSPARK_IGNORE_MEMORY=1`` skips it."""
    budget = memory_budget()
    if budget is None or os.environ.get("DSPARK_IGNORE_MEMORY"):
        return
    total, limit = budget
    use = needed + already
    if use > REFUSE_SHARE * total:
        raise DsparkError(f"{what} needs about {gib(needed)} of memory and {limit} "
                          f"({gib(already)} already in use by loaded models): choose a smaller or quantised "
                          f"checkpoint (set DSPARK_IGNORE_MEMORY=1 to try anyway)")
    if use > WARN_SHARE * total and say is not None:
        say(f"{what} needs about {gib(needed)} and {limit}: expect swapping")


__all__ = ["DRAFTER_FORMATS", "MAX_CONFIG_BYTES", "MAX_HEADER_BYTES", "PICKLES", "TOWER_PREFIXES", "check_fits",
           "drafter_format", "gib", "kind_of", "loaded_bytes", "not_a_drafter", "machine_memory", "memory_budget", "metal_working_set",
           "read_config", "read_header", "refuse_code", "safetensors_files", "tensor_bytes"]
