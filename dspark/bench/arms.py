"""The arms ``dspark bench`` times. Each runs one trial (a prompt's token ids, a token count, a
seed) and returns a plain record: the tokens, the decode seconds and, for speculative arms, the
per-round counts and phase times (see :mod:`dspark.bench.report` for what is derived).

- :class:`Plain`: mlx-lm's own ``generate_step``, run as mlx-lm runs it, with nothing else in
  the loop: plain decoding, which every speedup is over;
- :class:`Speculative`: this engine with one drafter and one verify policy;
- :class:`MlxLmDraft`: mlx-lm's own speculative decoding with a small draft model (a peer);
- :class:`Peer`: a peer package's speculative loop (z-lab ``dflash``, ``dflash-mlx``,
  ``mlx-dspark``, mlx-vlm's) with the same drafter, in a separate Python that has it installed
  (``make peers``), driven over pipes.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from statistics import median
from time import perf_counter

import mlx.core as mx
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.sample_utils import make_sampler

from .. import blas
from ..config import GenerationConfig
from ..engine import generate
from ..events import Summary
from .report import PEER_POLICY, PLAIN


def _sampler(config: GenerationConfig):
    sp = config.sampling
    return make_sampler(sp.temperature, top_p=sp.top_p if sp.top_p < 1 else 0.0, top_k=sp.top_k)


class Plain:
    """mlx-lm's ``generate_step`` at each of ``threads`` BLAS thread counts in turn (None: the
    BLAS's own count), each trial's figure the run at the count that was faster by median over the
    earlier trials like it: plain decoding at its best count on this machine now, not the default
    mlx-lm ships with nor a count guessed beforehand.
    Why every count in every trial: on a shared 2-core x86 CPU with OpenBLAS either count won by
    10-40% from one minute to the next, and a count picked once before the trials (2 threads, timed
    183 against 179 tok/s) then ran them at 148 tok/s where one thread had run 177 twenty minutes
    before: every speedup of that run was 1.2x too high. Why not the faster run of each trial: the
    faster of two noisy runs is faster than either count runs, by about half their spread; in one
    run of 18 trials (2026-12-06, 256 tokens, load 2.6 at the start) it put plain decoding 5-7%
    above the count chosen from the other trials, at every prompt length. The choice reads only
    earlier trials: those of the same prompt length and token count, else of the same token count
    (not the warm-up's), else ``first`` (the count the costs measurement found faster for a plain
    step), else the BLAS's own. On Apple silicon MLX computes on the GPU and there is no BLAS
    thread count to choose (``threads`` is [None])."""

    name, drafter, policy, kind = PLAIN, None, None, None

    def __init__(self, target, config: GenerationConfig, threads: list[int] | None = None, *, first: int | None = None):
        self.target, self.config, self.threads, self.first = target, config, threads or [None], first
        self.seen: list[tuple[int, int, dict]] = []  # (prompt length, tokens, tokens/sec by count) of earlier trials

    def trial(self, ids: list[int], max_tokens: int, seed: int) -> dict:
        order = self.threads if seed % 2 == 0 else self.threads[::-1]  # neither count always goes first
        runs = {k: self._run(ids, max_tokens, seed, k) for k in order}
        if len(runs) == 1:
            return next(iter(runs.values()))
        rate = {k: r["tokens"] / r["decode_seconds"] if r["decode_seconds"] > 0 else 0.0 for k, r in runs.items()}
        chosen = self.choose(len(ids), max_tokens)
        self.seen.append((len(ids), max_tokens, rate))
        return {
            **runs[chosen],
            "blas_threads": chosen,
            "tokens_per_sec_by_threads": {str(k): v for k, v in rate.items()},
        }

    def choose(self, length: int, max_tokens: int) -> int | None:
        """The count plain decoding's next trial of ``length`` prompt tokens and ``max_tokens``
        is judged at: the faster by median over the earlier trials like it (see the class)."""
        for like in (
            [r for n, m, r in self.seen if (n, m) == (length, max_tokens)],
            [r for _, m, r in self.seen if m == max_tokens],
        ):
            if like:
                return max(self.threads, key=lambda k: median(r[k] for r in like))
        return self.first if self.first in self.threads else max(self.threads, key=lambda k: k or 0)

    def _run(self, ids: list[int], max_tokens: int, seed: int, threads: int | None) -> dict:
        if threads:
            blas.set_threads(threads)
        else:
            blas.restore_threads()
        mx.random.seed(seed)
        marks: list[float] = []
        mx.reset_peak_memory()
        start = perf_counter()
        tokens, first = [], None
        steps = generate_step(
            mx.array(ids),
            self.target.model,
            max_tokens=max_tokens,
            sampler=_sampler(self.config),
            prefill_step_size=self.config.prefill_step_size,
            prompt_progress_callback=lambda done, total: marks.append(perf_counter()) if done < total else None,
        )
        for tok, _ in steps:
            if first is None:
                first = perf_counter()
            tokens.append(tok)
        end = perf_counter()
        blas.restore_threads()
        decode_start = marks[-1] if marks else start  # after all but the last prompt token
        return {
            "tokens": len(tokens),
            "token_ids": tokens,
            "decode_seconds": end - decode_start,
            "ttft_seconds": (first or end) - start,
            "peak_memory_bytes": int(mx.get_peak_memory()),
        }


def plain_thread_choices() -> list[int] | None:
    """The BLAS thread counts plain decoding is tried at in every trial: 1 and all of them with
    OpenBLAS on a multi-core machine, else None (the BLAS as it is)."""
    n = blas.default_threads()
    return [1, n] if n and n > 1 else None


class Speculative:
    def __init__(
        self, target, drafter, *, drafter_name: str, policy: str, config: GenerationConfig, costs=None, kind: str = ""
    ):
        """``drafter`` (named ``drafter_name``, of the format ``kind``) under the verify ``policy``,
        generating as ``config`` says (EOS ignored), the ``auto`` policy on this machine's ``costs``."""
        self.target, self.model, self.drafter, self.costs, self.kind = target, drafter, drafter_name, costs, kind
        self.policy = policy
        self.config = replace(config, policy=policy, stop_at_eos=False)
        self.name = f"{drafter_name} {policy}"

    def trial(self, ids: list[int], max_tokens: int, seed: int) -> dict:
        config = replace(self.config, max_tokens=max_tokens, seed=seed)
        # as a program would run it: nothing computed for a screen (generate's display)
        drafted, s = [], None
        for ev in generate(self.target, self.model, ids, config, costs=self.costs, display=False):
            if isinstance(ev, Summary):
                s = ev
            elif not ev.plain_step:  # a round that drafted: what the limit prices its draft by
                drafted.append(len(ev.drafted))
        return {
            "tokens": len(s.tokens),
            "token_ids": list(s.tokens),
            "decode_seconds": len(s.tokens) / s.tokens_per_sec,
            "ttft_seconds": s.ttft_seconds,
            "peak_memory_bytes": s.peak_memory_bytes,
            "rounds": s.rounds,
            "accepted": list(s.accepted_lengths),
            "widths": list(s.verify_widths),
            "drafted_per_round": drafted,
            "plain_steps": s.plain_steps,
            "draft_seconds": s.draft_seconds,
            "verify_seconds": s.verify_seconds,
            "plain_seconds": s.plain_seconds,
            "token_logprobs": list(s.token_logprobs),
            "prompt_tokens": list(s.prompt_tokens),
        }


class MlxLmDraft:
    """mlx-lm's ``speculative_generate_step`` with ``draft_model``, ``block_size`` tokens a round."""

    def __init__(self, target, draft_model, *, draft_name: str, block_size: int, config: GenerationConfig):
        self.target, self.draft_model, self.block_size, self.config = target, draft_model, block_size, config
        self.drafter, self.policy, self.kind = draft_name, f"mlx-lm:{block_size}", "mlx-lm draft model"
        self.name = f"mlx-lm draft {draft_name}"

    def trial(self, ids: list[int], max_tokens: int, seed: int) -> dict:
        mx.random.seed(seed)
        mx.reset_peak_memory()
        start = perf_counter()
        tokens, flags, first = [], [], None
        for tok, _, from_draft in speculative_generate_step(
            mx.array(ids),
            self.target.model,
            self.draft_model,
            num_draft_tokens=self.block_size,
            max_tokens=max_tokens,
            sampler=_sampler(self.config),
            prefill_step_size=self.config.prefill_step_size,
        ):
            if first is None:
                first = perf_counter()
            tokens.append(tok)
            flags.append(bool(from_draft))
        end = perf_counter()
        accepted, widths = _mlx_lm_rounds(flags, max_tokens, self.block_size)
        n, first_round = len(tokens), accepted[0] + 1 if accepted else 1
        # Tokens come a round at a time: the rate over the rounds after the first, as mlx-lm reports it.
        window = end - first if first else 0.0
        return {
            "tokens": n,
            "token_ids": tokens,
            "decode_seconds": window * n / max(n - first_round, 1),
            "ttft_seconds": (first or end) - start,
            "peak_memory_bytes": int(mx.get_peak_memory()),
            "rounds": len(accepted),
            "accepted": accepted,
            "widths": widths,
            "draft_seconds": 0.0,
            "verify_seconds": 0.0,
        }


def _mlx_lm_rounds(from_draft: list[bool], max_tokens: int, k: int) -> tuple[list[int], list[int]]:
    """(accepted drafts, drafts verified) per round of ``speculative_generate_step``, from its
    per-token flags: each round drafts min(k, tokens left), yields the drafts the target kept,
    then the target's own token unless the output is already full."""
    accepted, widths, i = [], [], 0
    while i < len(from_draft):
        w, a = min(k, max_tokens - i), 0
        while a < w and i < len(from_draft) and from_draft[i]:
            a, i = a + 1, i + 1
        if i < len(from_draft) and not from_draft[i]:
            i += 1
        accepted.append(a)
        widths.append(w)
    return accepted, widths


PEER_SERVER = Path(__file__).with_name("peer_server.py")


class Peer:
    """A peer's loop in ``python`` (a Python with the peer installed), one process per arm,
    kept alive across trials so loading is not timed."""

    def __init__(
        self,
        peer: str,
        *,
        python: str,
        target_dir: str,
        drafter_dir: str,
        drafter_name: str,
        block_size: int,
        kind: str = "",
        drafter_kind: str = "",
    ):
        """The ``peer``'s server started in ``python`` on the target and drafter directories;
        ``drafter_name`` names the arm, ``kind`` the drafter's format, ``block_size`` the tokens
        it drafts a round; ``drafter_kind`` is the peer's own name for the drafter's kind, when it
        needs one (mlx-vlm's ``draft_kind``)."""
        self.peer, self.drafter, self.policy, self.block_size, self.kind = (
            peer,
            drafter_name,
            PEER_POLICY,
            block_size,
            kind,
        )
        self.name = f"{peer} {drafter_name}"
        args = [python, str(PEER_SERVER), peer, target_dir, drafter_dir, blas.loaded_path() or ""]
        if drafter_kind:
            args += [drafter_kind, str(block_size)]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = self._read()
        if ready.get("error"):
            raise RuntimeError(ready["error"])

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()[-2000:]
            raise RuntimeError(
                f"the {self.peer} peer stopped: {err.strip().splitlines()[-1] if err.strip() else 'no output'}"
            )
        return json.loads(line)

    def trial(self, ids: list[int], max_tokens: int, seed: int) -> dict:
        self.proc.stdin.write(json.dumps({"ids": ids, "max_tokens": max_tokens, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        if out.get("error"):
            raise RuntimeError(out["error"])
        if len(out.get("widths") or []) != out["rounds"]:
            out["widths"] = [self.block_size] * out["rounds"]  # peers verify every drafted token
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


__all__ = ["MlxLmDraft", "PEER_SERVER", "Peer", "Plain", "Speculative", "plain_thread_choices"]
