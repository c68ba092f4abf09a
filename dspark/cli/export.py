"""``dspark export``: a drafter written as a published format's own checkpoint, exactly or not at
all (:mod:`dspark.export` writes and checks it)."""

from __future__ import annotations

import json

from .. import prompts as sets
from ..errors import DsparkError
from .say import say_printable, show

HELP = "write a drafter in a format vLLM or SGLang serves (dspark export --help)"


def add_parser(subparsers):
    from ..export_plan import FORMATS  # noqa: PLC0415 (slow: mlx, not needed for --help)

    p = subparsers.add_parser(
        "export",
        help=HELP,
        description="Write a drafter as a published format's own "
        "checkpoint, for vLLM or SGLang to serve: exactly (loaded back, it drafts what the "
        "drafter drafts) or not at all (one sentence says what the format cannot carry). The "
        "folder gets a README.md with the serve commands.",
    )
    p.add_argument("drafter", help="drafter directory or Hugging Face name")
    p.add_argument(
        "--format",
        required=True,
        choices=FORMATS,
        help="speculators: vLLM speculators (DSpark or DFlash "
        "heads); deepspec: DeepSpec's Gemma4DSparkModel; zlab: z-lab DFlash (DFlashDraftModel)",
    )
    p.add_argument("--out", required=True, help="directory to write (new or empty, unless --force)")
    p.add_argument(
        "--verifier",
        help="the target's Hugging Face name or path that serving loads: written as "
        "speculators_config.verifier.name_or_path (so `vllm serve OUT` finds it) and used in the README's "
        "commands (default: none; the README says TARGET)",
    )
    p.add_argument(
        "--drop-heads",
        action="store_true",
        help="leave out the Markov and confidence heads (z-lab's "
        "format has neither); says what acceptance the drafter keeps when --target is given",
    )
    p.add_argument(
        "--target",
        help="the drafter's target: checks the drafter fits it, and with --drop-heads "
        "measures greedy tau with and without the heads on --prompt-set (default: not measured)",
    )
    p.add_argument(
        "--prompt-set",
        default="demo",
        help="prompt set for that measurement: a bundled set or a .json / .txt file (default: demo)",
    )
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per prompt for that measurement (default: 128)")
    p.add_argument(
        "--force", action="store_true", help="replace what --out holds (removed only once the export is in place)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def run(a) -> int:
    from ..export import export_drafter, summary  # noqa: PLC0415 (slow: mlx, not needed for --help)

    if a.max_tokens < 2:
        raise DsparkError("--max-tokens must be at least 2")
    prompts = list(sets.get(a.prompt_set).prompts) if a.drop_heads and a.target else None
    r = export_drafter(
        a.drafter,
        a.format,
        a.out,
        verifier=a.verifier,
        drop_heads=a.drop_heads,
        force=a.force,
        target=a.target,
        prompts=prompts,
        tokens=a.max_tokens,
        say=say_printable,
    )
    if a.json:
        print(json.dumps(r))
        return 0
    show(summary(r, a.drop_heads))
    show(f"serve it with vLLM:\n{r['serve']['vllm']}\nSGLang: {r['serve']['sglang']}")
    return 0
