"""Reading a model directory, before anything of it is loaded: its config.json, whether it asks to
run code, what kind of directory it is (a target or which drafter format), its safetensors
headers (sizes without reading a tensor), and whether it fits in memory.

The bottom of the loading layer: it imports nothing of dspark but ``errors`` and ``reading``, so
the target loader, every drafter format and the writers build on it without reaching into each
other.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import sys
from pathlib import Path

from .errors import DsparkError
from .reading import kind_of_file, parse_json, read_json

#: A file larger than this is not a config.json (a crafted one could be gigabytes).
MAX_CONFIG_BYTES = 16 * 2**20
#: A safetensors JSON header larger than this is not a checkpoint.
MAX_HEADER_BYTES = 100 * 2**20
#: Bytes per element of every safetensors dtype; a header naming another is refused.
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "C64": 8,
}
#: The floating-point dtypes a weight may have (everything else is an index table or a quantized
#: layout, and only where a format says so).
FLOATS = ("F32", "F16", "BF16")
#: Weights mlx-lm's Gemma-4 loader throws away (vision and audio towers).
TOWER_PREFIXES = (
    "vision_tower",
    "multi_modal_projector",
    "audio_tower",
    "embed_audio",
    "embed_vision",
    "vision_embedder",
)
#: Weight files that can run code when loaded: never read.
PICKLES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
#: Above this share of the memory a model must fit in, a load is refused; above WARN_SHARE warned about.
REFUSE_SHARE, WARN_SHARE = 0.90, 0.70
#: The drafter formats this version reads (``dspark.formats``), by the name ``drafter_format`` gives.
DRAFTER_FORMATS = (
    "dspark-drafter",
    "zlab-dflash",
    "dflash2",
    "deepspec",
    "speculators",
    "eagle3",
    "gemma4-assistant",
)


# --------------------------------------------------------------------------- config.json
def read_config(directory: Path, what: str, name: str = "config.json") -> dict:
    """``directory/name`` as a dict, or a DsparkError saying what is wrong with it: only a regular
    file is read (a FIFO would block forever), bounded in size, depth and number length
    (``dspark.reading``)."""
    path = directory / name
    if not path.is_file() and not path.exists():
        raise DsparkError(f"{directory} has no {name}: not {what} directory")
    if path.is_dir():
        raise DsparkError(f"{directory} has no {name} ({name} is a folder): not {what} directory")
    config = read_json(path, MAX_CONFIG_BYTES, "config file")
    if not isinstance(config, dict):
        raise DsparkError(f"{path} does not hold a JSON object")
    return config


def check_files(directory: Path) -> None:
    """Every file of a model directory that a loader may open (mlx-lm, tokenizers and
    transformers open files by name, some by pattern) is, after following links, a regular file:
    a FIFO named tokenizer.json or a link to /dev/zero is refused before anything opens it.
    Hidden files (a killed write's temporaries) and folders are not read by any loader."""
    try:
        entries = list(os.scandir(directory))
    except OSError as e:
        raise DsparkError(f"cannot read {directory} ({e.strerror or e})") from None
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            mode = os.stat(entry.path).st_mode
        except OSError as e:
            raise DsparkError(
                f"{entry.path} cannot be read ({e.strerror or e}): a model directory holds only regular files"
            ) from None
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise DsparkError(
                f"{entry.path} is not a regular file but {kind_of_file(mode)}: a model directory holds "
                f"only regular files"
            )


def refuse_code(directory: Path, config: dict) -> None:
    """One sentence if ``directory`` asks to run code or ships only pickled weights."""
    code = sorted(p.name for p in directory.glob("*.py"))
    if "auto_map" in config or "model_file" in config or code:
        key = "auto_map" if "auto_map" in config else "model_file"
        what = f"Python files ({', '.join(code[:3])})" if code else f"custom code ({key} in config.json)"
        raise DsparkError(
            f"{directory} asks to run {what}; dspark never runs code from a checkpoint: "
            f"use a directory with config.json and .safetensors weights only"
        )
    if not safetensors_files(directory) and any(next(directory.glob(f"*{s}"), None) for s in PICKLES):
        raise DsparkError(
            f"{directory} holds pickled weights, which can run code when loaded: dspark reads .safetensors only"
        )


# --------------------------------------------------------------------------- what kind of directory
#: Google's Gemma-4 assistant drafters (``google/gemma-4-*-it-assistant``): their config's model_type.
ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")


def drafter_format(config: dict) -> str | None:
    """The drafter format a config.json is written in (one of ``DRAFTER_FORMATS``), None when it
    is not a drafter's; DsparkError for a drafter kind this version does not run."""
    arch = " ".join(a for a in (config.get("architectures") or []) if isinstance(a, str))
    if config.get("format") == "dspark-drafter":
        return "dspark-drafter"
    sc = config.get("speculators_config")
    if config.get("speculators_model_type") == "eagle3" or (isinstance(sc, dict) and sc.get("algorithm") == "eagle3"):
        return "eagle3"
    if "speculators_config" in config or "speculators_model_type" in config:
        return "speculators"
    if "DSparkModel" in arch or (
        "markov_rank" in config and "target_layer_ids" in config and "dflash_config" not in config
    ):
        return "deepspec"
    if config.get("model_type") in ASSISTANT_TYPES:
        return "gemma4-assistant"
    if "AssistantModel" in arch:  # an assistant of a model type this version does not know
        raise DsparkError(
            "this is a Gemma-4 assistant (MTP) drafter, which drafts from the target's own K/V cache "
            "one token a step: dspark does not run it yet"
        )
    if "DFlash2" in arch:  # z-lab's loader picks DFlash 2 by this name alone
        return "dflash2"
    if "dflash_config" in config or "DFlashDraftModel" in arch:
        return "zlab-dflash"
    return None


def not_a_drafter(config: dict) -> DsparkError:
    """The sentence for a config.json that ``drafter_format`` does not know."""
    if "model_type" in config and "hidden_size" in config:
        return DsparkError(
            f"this directory holds a model (model type {config.get('model_type')!r}), not a drafter: "
            f"give it as --target"
        )
    return DsparkError(
        "config.json is not a drafter this version knows (dspark, z-lab DFlash or DFlash 2, DeepSpec DSpark, vLLM "
        "speculators, EAGLE-3 or a Gemma-4 assistant)"
    )


def kind_of(config: dict) -> str:
    """ "drafter" or "target": what a directory with this config.json holds (a drafter kind this
    version refuses is still a drafter)."""
    arch = " ".join(a for a in (config.get("architectures") or []) if isinstance(a, str))
    drafter_keys = ("dflash_config", "speculators_config", "target_layer_ids", "format")
    named = "DSpark" in arch or "DFlash" in arch or "AssistantModel" in arch
    if named or config.get("model_type") in ASSISTANT_TYPES or any(k in config for k in drafter_keys):
        return "drafter"
    return "target"


# --------------------------------------------------------------------------- safetensors headers
def safetensors_files(directory: Path) -> list[Path]:
    """A directory's ``*.safetensors`` files, sorted, without hidden ones: a process killed while
    writing leaves ``.<name>.<pid>.tmp.safetensors`` (``dspark.files.atomic_write``), which is
    not part of the checkpoint (pathlib's glob, unlike a shell's, matches dot files)."""
    return sorted(f for f in Path(directory).glob("*.safetensors") if not f.name.startswith("."))


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file, without reading its tensors, checked as a whole:
    every entry names a known dtype, a shape and byte range that agree, and the ranges tile the
    data exactly (no gap, no overlap, no two tensors on the same bytes, no key twice), so what
    the header says is what the file holds."""
    if not path.is_file():
        raise DsparkError(f"{path} is not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise DsparkError(f"{path} is not a readable safetensors file ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DsparkError(f"{path} is not a regular file but {kind_of_file(st.st_mode)}")
        raw = os.pread(fd, 8, 0)
        if len(raw) < 8:
            raise DsparkError(f"{path} is not a safetensors file (too short)")
        n = struct.unpack("<Q", raw)[0]
        if n < 2 or n > MAX_HEADER_BYTES or n > st.st_size - 8:
            raise DsparkError(f"{path} is not a readable safetensors file (header length {n})")
        text = os.pread(fd, n, 8)
    except OSError as e:
        raise DsparkError(f"{path} is not a readable safetensors file ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(text) != n:
        raise DsparkError(f"{path} is not a readable safetensors file (its header is cut short)")
    header = parse_json(text, f"{path} (its safetensors header)", allow_nan=False)
    if not isinstance(header, dict):
        raise DsparkError(f"{path} is not a readable safetensors file (its header is not an object)")
    _check_entries(path, header, st.st_size - 8 - n)
    return header


def _check_entries(path: Path, header: dict, data_bytes: int) -> None:
    meta = header.get("__metadata__")
    if meta is not None and (not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())):
        raise DsparkError(f"{path} is not a readable safetensors file: its __metadata__ does not map names to strings")
    ranges = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        bad = _entry_problem(info)
        if bad:
            raise DsparkError(f"{path} is not a readable safetensors file: tensor {name[:200]!r} {bad}")
        begin, end = info["data_offsets"]
        ranges.append((begin, end, name))
    ranges.sort()
    at = 0
    for begin, end, name in ranges:  # first the worst: two tensors on the same bytes (one changes the other)
        if begin < at and end > begin:
            raise DsparkError(
                f"{path} is not a readable safetensors file: tensor {name[:200]!r} overlaps or shares "
                f"the bytes of another tensor (bytes {begin}..{end})"
            )
        at = max(at, end)
    at = 0
    for begin, end, name in ranges:
        if begin != at:
            raise DsparkError(
                f"{path} is not a readable safetensors file: tensor {name[:200]!r} leaves a gap before "
                f"it (bytes {at}..{begin} belong to no tensor)"
            )
        at = end
    if at != data_bytes:
        raise DsparkError(
            f"{path} is not a readable safetensors file: its tensors cover {at:,} bytes of data but it "
            f"holds {data_bytes:,} (truncated or damaged)"
        )


def _entry_problem(info) -> str | None:
    """What is wrong with one header entry, or None."""
    if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"}:
        return "is not a dtype, shape and data_offsets entry"
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        return f"has an unknown dtype {str(dtype)[:20]!r}"
    if not isinstance(shape, list) or len(shape) > 8 or not all(type(d) is int and d >= 0 for d in shape):
        return "has no valid shape (up to 8 non-negative sizes)"
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int and o >= 0 for o in offsets):
        return "has no valid data_offsets"
    if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
        return f"of shape {shape} and dtype {dtype} does not fill its {offsets[1] - offsets[0]} bytes"
    return None


def read_headers(directory: Path) -> dict[str, dict]:
    """Every tensor of a directory's safetensors files by name (its header entry), each file's
    header checked; a name in two files is refused (a loader would keep one of them)."""
    out: dict[str, dict] = {}
    for f in safetensors_files(directory):
        for name, info in read_header(f).items():
            if name == "__metadata__":
                continue
            if name in out:
                raise DsparkError(f"{directory}: tensor {name[:200]!r} is stored twice (in {f.name} and another file)")
            out[name] = info
    return out


def tensor_bytes(directory: Path, skip=TOWER_PREFIXES) -> int:
    """Bytes of the tensors a loader keeps (the towers' are skipped), from the headers."""
    total = 0
    for name, info in read_headers(directory).items():
        if not name.removeprefix("model.").startswith(skip):
            begin, end = info["data_offsets"]
            total += end - begin
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
    import mlx.core as mx  # noqa: PLC0415 (slow: mlx)

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
        import mlx.core as mx  # noqa: PLC0415 (slow: mlx)

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
        raise DsparkError(
            f"{what} needs about {gib(needed)} of memory and {limit} "
            f"({gib(already)} already in use by loaded models): choose a smaller or quantised "
            f"checkpoint (set DSPARK_IGNORE_MEMORY=1 to try anyway)"
        )
    if use > WARN_SHARE * total and say is not None:
        say(f"{what} needs about {gib(needed)} and {limit}: expect swapping")


__all__ = [
    "DRAFTER_FORMATS",
    "DTYPE_BYTES",
    "FLOATS",
    "MAX_CONFIG_BYTES",
    "MAX_HEADER_BYTES",
    "PICKLES",
    "TOWER_PREFIXES",
    "check_files",
    "check_fits",
    "drafter_format",
    "gib",
    "kind_of",
    "loaded_bytes",
    "not_a_drafter",
    "machine_memory",
    "memory_budget",
    "metal_working_set",
    "read_config",
    "read_header",
    "read_headers",
    "refuse_code",
    "safetensors_files",
    "tensor_bytes",
]
