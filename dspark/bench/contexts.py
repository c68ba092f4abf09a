"""Prompts of a chosen length, for ``dspark bench --context 64,1024,3000``: speed and acceptance
change with the length of the context a generation starts from (the target's global layers and
the drafter attend over all of it), and users' contexts are long (chat histories, documents,
code files).

A prompt of N tokens ends with the prompt set's own prompt (its last N tokens when it is longer)
and is padded in front with text of the same kind: the set's other prompts in turn, then the
held-out files of the demo corpus (which no demo model trained on), joined by blank lines. Every
prompt gets its own padding (the set's prompts from the next one on), so the long prompts of one
run differ, and the same command always builds the same prompts.
"""

from __future__ import annotations

import itertools

from ..corpus import iter_texts
from ..errors import DsparkError

#: The shortest and longest context a benchmark builds.
MIN_CONTEXT, MAX_CONTEXT = 8, 1_000_000


def parse(text: str) -> list[int]:
    """``"64,1024,3000"`` as sorted distinct lengths; one sentence when it is not that."""
    try:
        lengths = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise DsparkError(
            f"--context {text!r} is not a comma-separated list of token counts (e.g. 64,1024,3000)"
        ) from None
    if not lengths or lengths[0] < MIN_CONTEXT or lengths[-1] > MAX_CONTEXT or len(lengths) > 16:
        raise DsparkError(f"--context takes 1 to 16 token counts between {MIN_CONTEXT} and {MAX_CONTEXT:,}")
    return lengths


def positions(target) -> int | None:
    """The positions the target was trained on (its config's ``max_position_embeddings``), or
    None when it does not say."""
    config = target.config or {}
    limit = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    return limit if type(limit) is int and limit > 0 else None


def check_fits(target, length: int, max_tokens: int) -> None:
    """One sentence when a prompt of ``length`` tokens and ``max_tokens`` more pass the target's
    positions: said before the long prompts are built and any cost is measured on them, as
    figures measured past those positions describe no use of the target."""
    limit = positions(target)
    if limit is not None and length + max_tokens > limit:
        raise DsparkError(
            f"--context {length:,} and --max-tokens {max_tokens:,} make {length + max_tokens:,} positions, more "
            f"than the {limit:,} this target holds: choose a --context of at most {max(limit - max_tokens, 0):,}"
        )


def padded(target, prompts: list[list[int]], length: int) -> list[list[int]]:
    """Each prompt (token ids) as exactly ``length`` ids: padded in front as the module says."""
    sep = target.encode("\n\n")
    corpus = None
    out = []
    for i, ids in enumerate(prompts):
        if len(ids) >= length:
            out.append(list(ids[-length:]))
            continue
        pad: list[int] = []
        for other in prompts[i + 1 :] + prompts[:i]:
            if len(pad) + len(ids) >= length:
                break
            pad = pad + list(other) + sep
        if len(pad) + len(ids) < length:
            if corpus is None:
                corpus = [target.encode(t) for t in itertools.islice(iter_texts("heldout"), 200)]
            for text in corpus[i % max(len(corpus), 1) :] + corpus[: i % max(len(corpus), 1)]:
                if len(pad) + len(ids) >= length:
                    break
                pad = text + sep + pad
        whole = pad + list(ids)
        if len(whole) < length:
            raise DsparkError(
                f"the prompts and the held-out corpus hold fewer than {length:,} tokens: choose a shorter --context"
            )
        out.append(whole[-length:])
    return out


__all__ = ["MAX_CONTEXT", "MIN_CONTEXT", "check_fits", "padded", "parse", "positions"]
