"""Opening models by their Hugging Face name, as mlx-lm does: ``mlx-community/gemma-4-e2b-it-4bit``
resolves from the local Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``), and is downloaded
there, with a progress bar, when it is not cached and the hub is reachable. Only the files
mlx-lm itself fetches are downloaded (configs, safetensors, tokenizer, templates): never code.

``PUBLISHED`` lists the Gemma-4 targets and drafters the app offers in its Download dialog.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import DsparkError
from .modeldir import MAX_CONFIG_BYTES
from .modeldir import kind_of as kind_of_config
from .reading import read_json

#: What mlx-lm downloads for a model (``mlx_lm.utils.DEFAULT_ALLOW_PATTERNS``), less code.
ALLOW_PATTERNS = [
    "*.json",
    "model*.safetensors",
    "*.safetensors",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


@dataclass(frozen=True)
class Published:
    repo: str
    kind: str  # "target" or "drafter"
    note: str  # what it is, and for a drafter which target it needs


PUBLISHED = (
    Published("mlx-community/gemma-4-e2b-it-4bit", "target", "Gemma-4 E2B instruction-tuned, 4-bit (~2.6 GB)"),
    Published("mlx-community/gemma-4-e4b-it-4bit", "target", "Gemma-4 E4B instruction-tuned, 4-bit (~4.2 GB)"),
    Published("mlx-community/gemma-4-12B-it-4bit", "target", "Gemma-4 12B instruction-tuned, 4-bit (~6.7 GB)"),
    Published("mlx-community/gemma-4-12B-it-8bit", "target", "Gemma-4 12B instruction-tuned, 8-bit"),
    Published("mlx-community/gemma-4-26b-a4b-it-4bit", "target", "Gemma-4 26B-A4B MoE, 4-bit (~14 GB)"),
    Published("google/gemma-4-E2B-it", "target", "Gemma-4 E2B instruction-tuned, bf16 (~10 GB)"),
    Published("google/gemma-4-12B-it", "target", "Gemma-4 12B instruction-tuned, bf16 (~24 GB)"),
    Published("google/gemma-4-31B-it", "target", "Gemma-4 31B instruction-tuned, bf16 (~63 GB)"),
    Published("deepseek-ai/dspark_gemma4_12b_block7", "drafter", "DeepSpec DSpark for gemma-4-12B-it (block 7)"),
    Published("deepseek-ai/dflash_gemma4_12b_block7", "drafter", "DeepSpec DFlash baseline for gemma-4-12B-it"),
    Published("z-lab/gemma4-12B-it-DFlash", "drafter", "z-lab DFlash for gemma-4-12B-it"),
    Published("z-lab/gemma-4-31B-it-DFlash", "drafter", "z-lab DFlash for gemma-4-31B-it (block 16)"),
    Published("z-lab/gemma-4-26B-A4B-it-DFlash", "drafter", "z-lab DFlash for gemma-4-26B-A4B-it"),
    Published(
        "makora-ai/gemma4-26b-a4b-dspark", "drafter", "speculators DSpark for gemma-4-26B-A4B-it (32K draft vocab)"
    ),
    Published("rasyosef/gemma-4-E2B-it-dspark", "drafter", "speculators DSpark for gemma-4-E2B-it"),
    Published("rasyosef/gemma-4-E4B-it-dspark", "drafter", "speculators DSpark for gemma-4-E4B-it"),
)


def is_repo_id(name: str) -> bool:
    """``org/name`` that is not an existing path: a Hugging Face model name."""
    return bool(_REPO_ID.match(name)) and not Path(name).expanduser().exists()


def kind_of(directory: str | Path) -> str:
    """ "target" for a Gemma-4 model directory, "drafter" for anything else with a config."""
    try:  # bounded, regular files only: whatever the folder holds, this answers at once
        config = read_json(Path(directory) / "config.json", MAX_CONFIG_BYTES, "config file")
    except DsparkError:
        return "target"
    return kind_of_config(config) if isinstance(config, dict) else "target"


def cache_dir() -> Path:
    from huggingface_hub import constants  # noqa: PLC0415 (slow: huggingface_hub)

    return Path(constants.HF_HUB_CACHE)


def resolve(name: str, download: bool = True, tqdm_class=None, say=None) -> Path:
    """A local directory for ``name``: the path itself, or a Hugging Face name resolved from the
    local cache and, if allowed and needed, downloaded into it."""
    p = Path(name).expanduser()
    if p.exists() or not is_repo_id(name):
        return p
    from huggingface_hub import constants, snapshot_download  # noqa: PLC0415 (slow: huggingface_hub)
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError  # noqa: PLC0415 (slow: huggingface_hub)

    try:
        return Path(snapshot_download(name, allow_patterns=ALLOW_PATTERNS, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        pass
    except Exception as e:  # an incomplete snapshot, a damaged cache
        if not download:
            raise DsparkError(
                f"{name} is in the Hugging Face cache but cannot be used ({type(e).__name__}: {e})"
            ) from None
    where = cache_dir()
    if not download or constants.HF_HUB_OFFLINE:
        raise DsparkError(
            f"{name} is not in the local Hugging Face cache ({where}) and downloading is off "
            f"(HF_HUB_OFFLINE): {how_to_copy(name, where)}"
        )
    try:
        size = download_size(name)
        free = shutil.disk_usage(_existing_parent(where)).free
        if size and size > free:
            raise DsparkError(f"{name} needs {size / 1e9:.1f} GB and only {free / 1e9:.1f} GB are free in {where}")
        if say is not None:
            say(f"downloading {name}" + (f" ({size / 1e9:.2f} GB)" if size else "") + f" into {where}")
        return Path(snapshot_download(name, allow_patterns=ALLOW_PATTERNS, tqdm_class=tqdm_class))
    except DsparkError:
        raise
    except (HfHubHTTPError, OSError, ValueError) as e:
        if _offline(e):
            raise DsparkError(offline_sentence(name)) from None
        raise DsparkError(f"cannot download {name}: {_reason(e)}") from None


def how_to_copy(name: str, where: Path) -> str:
    """How ``name`` gets into the cache at ``where`` without the hub (a sentence's second half)."""
    return (
        f"download it where the hub is reachable and copy its cache folder models--{name.replace('/', '--')} "
        f"into {where}, or give the model's own folder instead"
    )


def offline_sentence(name: str) -> str:
    """What to do about ``name`` when the hub cannot be reached and the cache does not hold it."""
    where = cache_dir()
    return (
        f"the Hugging Face hub cannot be reached (offline?) and {name} is not in its cache ({where}): "
        + how_to_copy(name, where)
    )


def cached(name: str) -> Path | None:
    """The local snapshot of ``name`` when the cache holds one, without asking the hub."""
    if not is_repo_id(name):
        return None
    from huggingface_hub import snapshot_download  # noqa: PLC0415 (slow: huggingface_hub)

    try:
        return Path(snapshot_download(name, allow_patterns=ALLOW_PATTERNS, local_files_only=True))
    except Exception:  # not cached, or a damaged cache: not usable as it is
        return None


def download_size(name: str) -> int | None:
    """Bytes still to download for ``name`` (None when the hub does not say)."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415 (slow: huggingface_hub)

    try:
        files = snapshot_download(name, allow_patterns=ALLOW_PATTERNS, dry_run=True)
    except Exception:
        return None
    return sum(f.file_size for f in files if getattr(f, "will_download", True) and f.file_size)


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _offline(e: Exception) -> bool:
    """Whether a failed download means the hub could not be reached at all."""
    from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415 (slow: huggingface_hub)

    text = " ".join(str(e).split()).lower()
    return isinstance(e, LocalEntryNotFoundError) or any(
        s in text
        for s in (
            "connecterror",
            "connection error",
            "name or service not known",
            "failed to resolve",
            "max retries",
            "temporary failure in name resolution",
            "network is unreachable",
            "timed out",
            "offline",
        )
    )


def _reason(e: Exception) -> str:
    """One sentence for a failed download: the known cases in words, else the exception's first
    sentence, whole (a message cut at a character count ends mid-word)."""
    text = " ".join(str(e).split())
    if "401" in text or "403" in text or "gated" in text.lower():
        return "the repository is gated or private: accept its licence on huggingface.co and log in (hf auth login)"
    if "404" in text or "not found" in text.lower():
        return "no such repository on the hub"
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    if len(first) > 200:
        first = first[:200].rsplit(" ", 1)[0] + " …"
    return first or type(e).__name__


__all__ = [
    "ALLOW_PATTERNS",
    "PUBLISHED",
    "Published",
    "cache_dir",
    "cached",
    "download_size",
    "how_to_copy",
    "is_repo_id",
    "kind_of",
    "offline_sentence",
    "resolve",
]
