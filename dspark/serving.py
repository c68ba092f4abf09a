"""How an exported drafter is served: the README.md ``dspark export`` writes beside the weights,
with the command that serves it in vLLM and, where SGLang reads the format, in SGLang. The
commands are documented here, not run: neither engine runs on this project's machines.

- vLLM speculators: ``vllm serve DIR`` reads ``speculators_config`` (the verifier, the method,
  the speculative tokens) and loads the verifier itself; the long form names the target first.
  vLLM's ``update_dflash`` turns ``aux_hidden_state_layer_ids`` into z-lab's layer ids (each one
  less), which is why the export writes them one above the tapped layers.
- z-lab DFlash: vLLM's ``method: "dflash"`` with ``num_speculative_tokens`` = block slots - 1 (the
  anchor slot drafts nothing); SGLang's ``--speculative-algorithm DFLASH``, whose
  ``--speculative-num-draft-tokens`` is the block's slots.
- DeepSpec: vLLM's ``method: "dspark"`` (``Gemma4DSparkModel``), ``num_speculative_tokens`` = the
  block size (vLLM refuses fewer). SGLang's DSPARK serves DeepSeek-V4 and Qwen3 drafters, not
  Gemma-4 ones.
"""

from __future__ import annotations

import json
import shlex

from .errors import printable


def quote(word: str) -> str:
    """``word`` as one word of a POSIX shell command (a path with spaces, quotes or ``$(...)``
    stays one argument, never code): every command written for a user to paste goes through it."""
    return shlex.quote(str(word))


TITLES = {
    "speculators": "vLLM speculators",
    "deepspec": "DeepSpec DSpark (Gemma4DSparkModel)",
    "zlab": "z-lab DFlash (DFlashDraftModel)",
}


def _vllm(target: str, out: str, method: str, tokens: int) -> str:
    config = json.dumps({"method": method, "model": out, "num_speculative_tokens": tokens})
    return f"vllm serve {quote(target)} \\\n  --speculative-config {quote(config)}"


def commands(fmt: str, config: dict, drafts: int, out: str, *, verifier: str | None) -> dict[str, str]:
    """{"vllm": ..., "sglang": ...} for a drafter of ``drafts`` tokens a round written in ``fmt``
    with ``config`` at ``out``; a value that is not a command says why there is none."""
    target = verifier or "TARGET"
    if fmt == "speculators":
        method = config.get("speculators_model_type", "dspark")
        short = f"vllm serve {quote(out)}\n" if verifier else ""
        return {
            "vllm": short + _vllm(target, out, method, drafts),
            "sglang": "SGLang does not read speculators-format DSpark or DFlash drafters yet (speculators issue "
            "753): export a DFlash-style drafter with --format zlab for SGLang.",
        }
    if fmt == "zlab":
        slots = config["dflash_config"]["block_size"]
        return {
            "vllm": _vllm(target, out, "dflash", drafts),
            "sglang": f"python -m sglang.launch_server --model-path {quote(target)} \\\n  --speculative-algorithm "
            f"DFLASH --speculative-draft-model-path {quote(out)} \\\n  --speculative-num-draft-tokens {slots}",
        }
    return {
        "vllm": _vllm(target, out, "dspark", drafts),
        "sglang": "SGLang's DSPARK algorithm serves DeepSeek-V4 and Qwen3 drafters, not Gemma-4 ones: serve this "
        "drafter with vLLM.",
    }


def readme(fmt: str, config: dict, info: dict, out: str, *, verifier: str | None) -> str:
    """The exported directory's README.md: what it is, where it came from, how to serve it.
    ``info``: the drafter's source, drafts per round, taps, and the heads left out."""
    cmds = commands(fmt, config, info["block_size"], out, verifier=verifier)
    lines = [
        f"# A {TITLES[fmt]} drafter, exported by dspark",
        "",
        f"Exported from `{printable(info['source'])}` ({info['source_format']}) by `dspark export --format {fmt}`. "
        "Loaded back by dspark, it drafts the same logits and the same tokens as the drafter it came from "
        "(checked when it was written).",
        "",
        f"- drafts {info['block_size']} tokens a round; taps target layers {info['taps']}"
        + (
            f" (`aux_hidden_state_layer_ids` {config.get('aux_hidden_state_layer_ids')}: vLLM's numbering, one above)"
            if fmt == "speculators"
            else ""
        ),
        "- target (verifier): "
        + (printable(verifier) if verifier else "not given at export (TARGET below: the target it was trained for)"),
    ]
    if fmt == "speculators" and config.get("final_logit_softcapping"):
        lines.append(
            f"- `final_logit_softcapping` {config['final_logit_softcapping']}: dspark caps the drafter's logits as "
            "the target does; speculators' own config has no such key, so a server may leave them uncapped. "
            "A cap keeps the logits' order, so the head's greedy drafts stay the same; what is added to "
            "capped logits (a Markov head's biases) and sampled drafts may not."
        )
    if info.get("dropped"):
        heads = " and ".join(info["dropped"]) + (" heads" if len(info["dropped"]) > 1 else " head")
        lines.append(f"- left out: its {heads} (--drop-heads); " + info["acceptance"])
    lines += ["", "## Serve with vLLM", "", "```bash", cmds["vllm"], "```", "", "## Serve with SGLang", ""]
    sglang = cmds["sglang"]
    lines += ["```bash", sglang, "```"] if sglang.startswith("python ") else [sglang]
    lines += ["", "These commands are documented, not run by dspark.", ""]
    return "\n".join(lines)


__all__ = ["TITLES", "commands", "quote", "readme"]
