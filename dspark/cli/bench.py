"""``dspark bench``: its options, checked, the benchmark run (:func:`dspark.bench.trials.run`) and
its summary printed as a table (``--json``: one object)."""

from __future__ import annotations

import json

from ..bench import busy, trials
from ..config import GenerationConfig
from ..errors import DsparkError
from ..options import check_options
from ..serving import quote
from .say import say, say_printable, show

#: The most tokens mlx-lm's draft model drafts a round (a drafter's block size has the same bound).
MAX_NUM_DRAFT = 64

HELP = "time speculative decoding against plain mlx-lm decoding (dspark bench --help)"


def add_parser(subparsers):
    p = subparsers.add_parser(
        "bench", help=HELP, description="Time speculative decoding against plain mlx-lm decoding."
    )
    p.add_argument("--target", help="target directory or Hugging Face name (default: the bundled demo target)")
    p.add_argument(
        "--drafter",
        action="append",
        default=[],
        help="drafter directory (repeatable; default with the demo target: the demo drafters)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt-set", help="a bundled prompt set (default: demo) or a .json / .txt set file")
    src.add_argument(
        "--prompts", help="a file of prompts: a .json list or a .txt with prompts separated by '---' lines"
    )
    p.add_argument("--prompt-count", type=int, help="use only the first N prompts")
    p.add_argument(
        "--context",
        help="comma-separated prompt lengths in tokens (e.g. 64,1024,3000): every arm runs "
        "on each prompt padded to each length (dspark.bench.contexts), reported per length",
    )
    p.add_argument("--max-tokens", type=int, default=256, help="tokens each trial generates (EOS ignored)")
    p.add_argument("--repeats", type=int, default=3, help="trials per prompt and arm")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy, outputs compared)")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        help="verify policy per drafter (repeatable; default: fixed and auto): fixed, fixed:K, threshold:C, auto",
    )
    p.add_argument("--mlx-lm-draft", help="also run mlx-lm's own speculative decoding with this small draft model")
    p.add_argument("--mlx-lm-num-draft", type=int, default=3, help="draft tokens per round of --mlx-lm-draft")
    p.add_argument(
        "--peer",
        action="append",
        default=[],
        choices=["dflash", "dflash-mlx", "mlx-dspark", "mlx-vlm"],
        help="also run this peer package's loop with each drafter it reads (repeatable; mlx-vlm: "
        "the Gemma-4 assistant, EAGLE-3, DFlash 2, z-lab and DSpark heads)",
    )
    p.add_argument("--peer-python", help="a Python with the peers installed (default: the checkout's .venv-peers)")
    p.add_argument("--out", required=True, help="folder for trials.jsonl, trials.csv, summary.json (and figures)")
    p.add_argument("--force", action="store_true", help="replace the results already in --out")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="run N processes that each keep a core busy beside the costs measurement and the trials, "
        "ended with them: the floor of auto on a busy machine, measured reproducibly (default: 0)",
    )
    return p


def _check(a) -> None:
    for name, value, lo in (
        ("--max-tokens", a.max_tokens, 2),
        ("--repeats", a.repeats, 1),
        ("--mlx-lm-num-draft", a.mlx_lm_num_draft, 1),
    ):
        if value < lo:
            raise DsparkError(f"{name} must be at least {lo}")
    if a.mlx_lm_num_draft > MAX_NUM_DRAFT:
        raise DsparkError(
            f"--mlx-lm-num-draft must be between 1 and {MAX_NUM_DRAFT} (the longest block a drafter here drafts)"
        )
    if a.mlx_lm_draft and a.mlx_lm_num_draft > a.max_tokens - 2:
        # mlx-lm's arm is timed from its first round on: a first round that makes every token
        # leaves nothing timed, and the rate it would report is a division by almost nothing
        raise DsparkError(
            f"--mlx-lm-num-draft {a.mlx_lm_num_draft} could make all {a.max_tokens} tokens in mlx-lm's first "
            f"round, which its timing starts after: give at most {max(a.max_tokens - 2, 1)} or more --max-tokens"
        )
    if not 0 <= a.load <= busy.MOST:
        raise DsparkError(f"--load must be between 0 and {busy.MOST} busy processes")
    if a.prompt_count is not None and a.prompt_count < 1:
        raise DsparkError("--prompt-count must be at least 1")
    if not 0 <= a.temperature <= 100:
        raise DsparkError("--temperature must be between 0 and 100")
    # the generation settings' own rules (a temperature of 1e-40), before --out is made
    check_options(GenerationConfig(temperature=a.temperature))
    if a.peer and a.temperature > 0:
        raise DsparkError("the peer arms run greedy only: drop --peer or --temperature")


def run(a) -> int:
    _check(a)
    if a.load:
        say(f"{a.load} busy process{'es' if a.load > 1 else ''} run beside the trials (--load)")
    with busy.load(a.load):
        doc = trials.run(a, say_printable)  # it names drafter folders, which may hold anything
    say_printable(
        f"figures: dspark-studio --bench-figures {quote(a.out)} (or File ▸ Open run or benchmark… in the app)"
    )
    if a.json:
        print(json.dumps(doc))
    else:  # the arms are named by their drafters' folders: shown, never obeyed
        show(table(doc))
    return 0


def table(doc: dict) -> str:
    """The per-arm figures as a text table."""
    head = (
        f"{'arm':<28} {'kind':<16} {'tok/s':>7} {'speedup':>16} {'tau':>5} {'drafts':>6} {'draft':>6} "
        f"{'/token':>6} {'verify':>6} {'other':>6} {'limit':>6} {'effic.':>6}  same output"
    )
    lines = [head, "-" * len(head)]
    for s in doc["arms"]:
        sp = s.get("speedup_spread") or {}
        speed = f"{s['speedup']:.2f}x [{sp['p25']:.2f}-{sp['p75']:.2f}]" if "speedup" in s else "1 (plain)"
        f = lambda k, fmt="{:.1f}", s=s: fmt.format(s[k]) if s.get(k) is not None else "-"
        same = (
            f"{s['identical']}/{s['compared']}"
            + (f" ({s['lossless'] - s['identical']} ties)" if s["lossless"] > s["identical"] else "")
            if "compared" in s
            else ""
        )
        if "vs_project" in s:
            v = s["vs_project_spread"]
            same += f"  {s['vs_project_arm']}: {s['vs_project']:.2f}x this one's tok/s [{v['p25']:.2f}-{v['p75']:.2f}]"
        name = f"{s['arm']} @{s['context']}" if s.get("context") else s["arm"]
        lines.append(
            f"{name[:28]:<28} {(s.get('kind') or '')[:16]:<16} {s['tokens_per_sec']:>7.1f} {speed:>16} "
            f"{f('tau', '{:.2f}'):>5} {f('drafted', '{:.2f}'):>6} {f('draft_ms'):>6} "
            f"{f('draft_token_ms', '{:.2f}'):>6} {f('verify_ms'):>6} {f('overhead_ms'):>6} "
            f"{f('limit', '{:.2f}'):>6} {f('efficiency', '{:.2f}'):>6}  {same}"
        )
    env = doc["environment"]
    lines.append(
        f"\n{env['cpu']} ({env['cpus']} cores), {env['os']}; MLX {env['mlx']} on {env['device']}; "
        f"BLAS: {env['blas']}; load average at start {env.get('load_average')}"
        + (f"; {env['busy_processes']} busy processes beside the trials (--load)" if env.get("busy_processes") else "")
    )
    lines.append(
        "per round: drafts (tokens drafted); in ms: draft, /token (draft per drafted token), verify, other "
        "(events, text, the loop); limit = tau x plain step / (isolated draft + verify costs; an autoregressive "
        "drafter's draft priced per token); efficiency = speedup / limit"
    )
    return "\n".join(lines)
