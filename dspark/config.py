"""Settings as data, without MLX: one generation's (``GenerationConfig``; the app's GUI thread builds
its form from it, see :mod:`dspark.options`, and never loads a model) and a drafter's shape
(``DflashConfig``, which ``dspark init`` and ``dspark train`` build their options from)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import DsparkError
from .options import check_options, option
from .reading import parse_json


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0  # 1 (or 0) means off
    top_k: int = 0  # 0 means off

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


@dataclass(frozen=True, kw_only=True)
class GenerationConfig:
    max_tokens: int = option(256, "tokens to generate", lo=1, hi=1_000_000)
    # least: the sampler divides log-probabilities (as low as -log V, about -15) by it, in the
    # target's dtype; 1e-40 is below float32's smallest normal and gave <pad> streams, and at
    # 0.001 even a float16 target's largest value (65,504) is far off
    temperature: float = option(
        0.0,
        "sampling temperature; 0 is greedy (output equals plain greedy decoding)",
        lo=0.0,
        hi=100.0,
        step=0.1,
        least=0.001,
    )
    top_p: float = option(
        1.0,
        "nucleus sampling: keep the most likely tokens up to this probability (1: off)",
        lo=0.0,
        hi=1.0,
        label="Top-p",
        step=0.05,
    )
    top_k: int = option(0, "keep only the k most likely tokens (0: off)", lo=0, hi=10_000_000, label="Top-k")
    seed: int = option(0, "random seed of sampling", lo=0, hi=2**31 - 1)
    block_size: int | None = option(None, "drafted tokens per round", lo=0, hi=64, none="the drafter's own")
    # auto by default: on a machine or in a state where drafting cannot pay (no fast BLAS, a busy
    # CPU) it decodes plainly instead of running slower than plain decoding; fixed is one word away
    policy: str = option(
        "auto",
        "how many drafted tokens the target verifies each round: auto (as many as raise the "
        "expected tokens per second on this machine's measured costs, decoding plainly where no "
        "round pays), fixed (all), fixed:K (the first K) or threshold:C (the prefix whose "
        "predicted survival stays above C; needs a confidence head)",
        label="Verify policy",
        suggest=("auto", "fixed", "threshold:0.3", "fixed:2", "fixed:4"),
    )
    stop_at_eos: bool = option(
        True, "stop at the target's end-of-sequence token", flag="--ignore-eos", label="Stop at EOS"
    )
    chat_template: bool = option(
        True,
        "wrap a text prompt in the tokenizer's chat template as one user turn, "
        "when the tokenizer has one (instruction-tuned -it models)",
        flag="--ignore-chat-template",
        label="Chat template",
    )
    system_prompt: str = option("", "a system turn before the prompt (with the chat template)", label="System prompt")
    chat_template_config: str = option(
        "",
        "JSON object of extra chat-template options, as mlx-lm's; thinking is off "
        'unless it says {"enable_thinking": true}',
        form=False,
    )
    prefill_step_size: int = option(
        2048, "prompt tokens per forward while processing the prompt", lo=1, hi=1_000_000, form=False
    )

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k)

    def check(self, vocab_size: int | None = None) -> None:
        from .policy import parse  # noqa: PLC0415 (not needed for --help)

        check_options(self)
        parse(self.policy)
        self.template_options()
        if vocab_size is not None and self.top_k > vocab_size:
            raise DsparkError(f"top-k {self.top_k} is larger than the target's vocabulary ({vocab_size})")

    def template_options(self) -> dict:
        """Keyword options for the chat template: thinking off unless asked for (Gemma-4's own
        default, and how the published drafters were trained; mlx-lm turns it on)."""
        if not self.chat_template_config.strip():
            return {"enable_thinking": False}
        # bounded like every JSON dspark reads (depth, number length, keys given twice)
        extra = parse_json(self.chat_template_config, "chat-template-config", allow_nan=False)
        if not isinstance(extra, dict):
            raise DsparkError("chat-template-config must be a JSON object")
        return {"enable_thinking": False, **extra}


def default_taps(num_layers: int, n: int = 3) -> tuple[int, ...]:
    """DFlash's rule: ``n`` evenly spaced layers from 1 to N-3 (N//2 when n == 1)."""
    if n == 1:
        return (num_layers // 2,)
    hi = max(1, num_layers - 3)
    return tuple(sorted({round(1 + i * (hi - 1) / (n - 1)) for i in range(n)}))


@dataclass(frozen=True, kw_only=True)
class DflashConfig:
    """The drafter's shape (``dspark init`` and ``dspark train`` build their options from it)."""

    block_size: int = option(7, "tokens drafted per round (G)", lo=1, hi=64)
    num_layers: int = option(2, "drafter transformer layers", flag="--layers", lo=1, hi=64)
    tap_layers: tuple[int, ...] = option(
        (), "comma-separated target layer indices whose outputs the drafter reads", flag="--taps", none="evenly spaced"
    )
    mask_token_id: int = option(
        4, "the mask token filling the block after the anchor (Gemma's <mask> is 4)", lo=0, hi=10_000_000
    )
    markov: bool = option(True, "DSpark's Markov head (--no-markov: DFlash-style)")
    markov_rank: int = option(256, "rank of the Markov head", lo=1, hi=65_536)
    confidence: bool = option(True, "the confidence head")
    rope_theta: float = option(10000.0, "RoPE base of the drafter's attention", lo=1.0, hi=1e12)
    intermediate_size: int = option(0, "MLP width (0: the target's)", lo=0, hi=1_000_000)
    context_window: int = option(
        0,
        "context rows a block attends to before its anchor, in training and drafting "
        "(0: all of them): bounds the draft's cost on long prompts",
        lo=0,
        hi=10_000_000,
    )
    format: str = option(
        "native",
        "the checkpoint format the drafter is built in: native (this project's "
        "Gemma-style layers), speculators (vLLM), zlab (z-lab DFlash; no heads) or deepspec "
        "(DeepSeek; no context window); a published format serves as it is",
        choices=("native", "speculators", "zlab", "deepspec"),
    )

    @classmethod
    def from_dict(cls, d: dict) -> DflashConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise DsparkError(f"unknown drafter config keys: {sorted(unknown)}")
        d = dict(d)
        if "tap_layers" in d:
            d["tap_layers"] = tuple(d["tap_layers"])
        return cls(**d)
