"""``dspark export DRAFTER --format speculators|deepspec|zlab --out DIR``: a drafter written as a
published format's own checkpoint, exactly or not at all.

What the format must carry, and the one-sentence refusal when it cannot, is the plan
(``dspark.export_plan``). The export is then written into a hidden folder beside ``--out``:
``model.safetensors`` (the network's tensors under the checkpoint's names and dtypes, with the
reduced vocabulary's ``d2t`` offsets and ``t2d`` mask when it has one), ``config.json`` (the
format writer's, serving keys included) and a ``README.md`` with the vLLM and SGLang commands
(``dspark.serving``). That folder is loaded back by ``load_drafter`` and must draft what the
drafter drafts on a probe (``same_drafts``: the backbone's output, the logits, the drafted
tokens, their probabilities and confidences, to float rounding), or it is deleted and nothing
is written. Only then does it become ``--out`` (one rename; with ``--force`` the folder there is
removed only after the new one is in place).

``--drop-heads`` leaves the Markov and confidence heads out; with ``--target`` the acceptance the
drafter reaches with and without them is measured on a prompt set, greedy, as ``dspark bench``
and the demo build measure it (``acceptance``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import unicodedata
from contextlib import contextmanager, suppress
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from . import metrics, serving
from .config import GenerationConfig, SamplingParams
from .drafting import DraftOpts
from .errors import DsparkError
from .export_plan import FORMATS, Plan, exportable, loaded_source, plan, read_source
from .files import alive, exchange, reason, save_safetensors, short, staged_dir, write_text
from .loading import load_drafter, load_target, read_drafter_config

WEIGHTS = "model.safetensors"


class ProbeProjection:
    """A stand-in for a target's embedding table and tied head (rank 8, so any vocabulary is
    cheap), for comparing two drafters that borrow them when no target is given: both see the
    same one, so the same drafter drafts the same block through it."""

    def __init__(self, vocab: int, hidden: int, rank: int = 8, seed: int = 7):
        ka, kb = mx.random.split(mx.random.key(seed))
        self.a = mx.random.normal((vocab, rank), key=ka)
        self.b = mx.random.normal((hidden, rank), key=kb) * rank**-0.5
        self.embed_scale, self.softcap, self.vocab_size = hidden**0.5, None, vocab

    def table(self, ids: mx.array) -> mx.array:
        return self.a[ids] @ self.b.T

    def embed(self, ids: mx.array) -> mx.array:
        return self.table(ids) * self.embed_scale

    def head(self, h: mx.array) -> mx.array:
        return (h @ self.b) @ self.a.T

    def cap(self, x: mx.array) -> mx.array:
        return x

    def logits(self, h: mx.array) -> mx.array:
        return self.head(h)


def same_drafts(original, exported, proj, rows: int = 24) -> str | None:
    """None when ``exported`` drafts what ``original`` drafts after ``rows`` random context rows
    (greedy: backbone output, logits before the Markov bias, tokens, probabilities, confidence
    logits); else which of them differ and by how much."""
    m, H = len(original.tap_layers), original.net.fc.weight.shape[0]
    kh, ka = mx.random.split(mx.random.key(11))
    context = mx.random.normal((1, rows, m * H), key=kh)
    anchor = int(mx.random.randint(0, proj.vocab_size, (1,), key=ka)[0])
    a, b = (
        d.forward_rows(proj, context, [anchor], original.block_size, opts=DraftOpts(SamplingParams()))
        for d in (original, exported)
    )
    pairs = {
        "backbone output": (a.hidden, b.hidden),
        "logits": (original.head(proj, a.hidden), exported.head(proj, b.hidden)),
        "draft probabilities": (a.draft_probs, b.draft_probs),
    }
    if a.conf_logits is not None or b.conf_logits is not None:
        if a.conf_logits is None or b.conf_logits is None:
            return "the confidence head"
        pairs["confidence logits"] = (a.conf_logits, b.conf_logits)
    for name, (x, y) in pairs.items():
        x, y = np.array(x.astype(mx.float32)), np.array(y.astype(mx.float32))
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(x).max()))):
            return f"the {name} (largest difference {float(np.abs(x - y).max()) if x.shape == y.shape else 'in shape'})"
    if a.tokens.tolist() != b.tokens.tolist():
        return f"the drafted tokens ({a.tokens.tolist()[0]} against {b.tokens.tolist()[0]})"
    return None


def acceptance(target, drafter, prompts: list[str], tokens: int) -> float:
    """Greedy tau (committed tokens per round, bonus included) of ``drafter`` over ``prompts``."""
    from .engine import generate  # noqa: PLC0415 (slow: the engine, only for dropped heads)

    config = GenerationConfig(max_tokens=tokens, stop_at_eos=False, policy="fixed")  # every draft verified
    rounds = [ev for p in prompts for ev in list(generate(target, drafter, p, config, display=False))[:-1]]
    return metrics.summarize(rounds).tau


# --------------------------------------------------------------------------- writing
def check_name(out: Path) -> None:
    """Refuse an --out that names no folder of its own (``.``, ``..``) or that no command could
    quote back: the README writes it into commands a user pastes."""
    if out.name in ("", ".", ".."):
        raise DsparkError(
            f"--out {str(out)!r} names no folder of its own: give the export a new folder (e.g. --out ./exported)"
        )
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in str(out)):
        raise DsparkError(
            f"--out {str(out)!r} holds a control character (a line break, an escape): the serve commands written "
            f"for it could not be pasted; choose a plain folder name"
        )


def check_out(out: Path, drafter_dir: Path, force: bool) -> None:
    """Refuse an --out that is a file, holds something (without --force) or holds the drafter."""
    try:  # a path past PATH_MAX fails at the first look
        if out.exists() and not out.is_dir():
            raise DsparkError(f"{out} is a file, not a directory")
        src, dst = drafter_dir.resolve(), out.resolve()
        if dst == src or dst in src.parents:
            raise DsparkError(f"{out} holds the drafter being exported: choose another folder to export to")
        if out.is_dir() and any(out.iterdir()) and not force:
            raise DsparkError(f"{out} exists and is not empty (use --force to replace what it holds)")
    except OSError as e:
        raise DsparkError(f"cannot use {short(out)} as the export's folder ({reason(e)})") from None


def check_verifier(verifier: str | None) -> None:
    """A verifier is a Hugging Face name or a path: one holding a control character is refused,
    as it goes into config.json and into the commands the README gives to paste."""
    if verifier is not None and (
        not verifier.strip() or any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in verifier)
    ):
        raise DsparkError(
            f"--verifier {verifier!r} is not a Hugging Face name or a path (it is empty or holds a control "
            f"character such as a line break or an escape)"
        )


#: The hidden names a replacing export uses beside ``--out``: the new folder while it is written
#: and checked (``export``), and, where the system cannot swap two folders in one step, the old
#: one moved aside (``replaced``); each ends in the writing process's id.
_HIDDEN = re.compile(r"\.(?P<name>.+)\.(?P<kind>export|replaced)-(?P<pid>[0-9]+)")
_STAGING = re.compile(r"\.\.(?P<name>.+)\.export-(?P<pid>[0-9]+)\.[0-9]+\.tmp")


def finish_killed(out: Path, say) -> None:
    """What an export killed while it replaced ``out`` left beside it, put right before this one
    starts: a folder missing from ``out`` is put back from the whole copy the killed run kept
    (the old export first; ``say`` hears where it was), and every hidden copy and staging folder
    of a process that is gone is removed. A run still going is left alone."""
    found: dict[str, list[Path]] = {"replaced": [], "export": [], "staging": []}
    try:
        entries = list(out.parent.iterdir()) if out.parent.is_dir() else []
    except OSError:
        return
    for entry in entries:
        m = _HIDDEN.fullmatch(entry.name) or _STAGING.fullmatch(entry.name)
        if m is None or m["name"] != out.name or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or alive(pid):
            continue
        found[m.groupdict().get("kind") or "staging"].append(entry)
    for kind in ("replaced", "export"):
        for stale in sorted(found[kind]):
            if not os.path.lexists(out):
                try:
                    os.rename(stale, out)
                except OSError as e:
                    raise DsparkError(
                        f"{out} is missing: an export killed while replacing it left it in {stale}, and it could "
                        f"not be put back ({reason(e)}): move it back by hand"
                    ) from None
                say(f"{out} was missing: an export killed while replacing it had left it in {stale}; put back")
            else:
                shutil.rmtree(stale, ignore_errors=True)
    for stale in found["staging"]:
        shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def output(out: Path):
    """A folder to fill that becomes ``out`` whole when the block ends without an error: a new
    or empty ``out`` by one rename (``staged_dir``); a full one (``--force``) is swapped with the
    new one in one step where the system can (``files.exchange``), else moved aside and the new
    one renamed in; only then is the old one removed, so a failure loses nothing, and what a
    killed run leaves is put right by the next (:func:`finish_killed`, before ``out`` is checked)."""
    if not out.is_dir() or not any(out.iterdir()):
        with staged_dir(out) as tmp:
            yield tmp
        return
    fresh = out.with_name(f".{out.name}.export-{os.getpid()}")
    with staged_dir(fresh) as tmp:
        yield tmp
    try:
        swapped = exchange(fresh, out)
    except OSError as e:
        shutil.rmtree(fresh, ignore_errors=True)
        raise DsparkError(f"could not put the export in place of {out} ({reason(e)}); {out} is unchanged") from None
    if swapped:  # the old export is now under the hidden name
        shutil.rmtree(fresh, ignore_errors=True)
        return
    old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    try:
        os.rename(out, old)
        os.rename(fresh, out)
    except OSError as e:
        if old.exists() and not os.path.lexists(out):
            with suppress(OSError):  # else the next export puts it back (finish_killed)
                os.rename(old, out)
        raise DsparkError(f"could not put the export in place of {out} ({reason(e)}); it is in {fresh}") from None
    shutil.rmtree(old, ignore_errors=True)


def write(folder: Path, drafter, p: Plan) -> None:
    """The checkpoint's weights and config, in ``folder``: weights first, so a config never
    names weights that are not there."""
    arrays = dict(tree_flatten(drafter.net.parameters()))
    ids = getattr(drafter, "draft_to_target", None)
    if ids is not None:  # speculators' tables: draft id + d2t[id] = target id; t2d marks the target ids drafted
        arrays["d2t"] = (ids - mx.arange(ids.shape[0])).astype(mx.int64)
        t2d = mx.zeros((drafter.spec.vocab,), mx.bool_)
        t2d[ids] = True
        arrays["t2d"] = t2d
    save_safetensors(folder / WEIGHTS, arrays, {"format": "pt"})
    write_text(folder / "config.json", json.dumps(p.config, indent=2) + "\n")


def export_drafter(
    path,
    fmt: str,
    out,
    *,
    verifier: str | None = None,
    drop_heads: bool = False,
    force: bool = False,
    target=None,
    prompts: list[str] | None = None,
    tokens: int = 128,
    say=None,
) -> dict:
    """Write the drafter at ``path`` as ``fmt`` into ``out``, exactly, or raise DsparkError (one
    sentence) with nothing written. ``verifier``: the target's name that serving loads (written
    into the config and the README); ``drop_heads`` leaves out the Markov and confidence heads;
    ``force`` replaces what ``out`` holds. ``target``: a loaded Target or a target directory
    (loaded once the plan stands), to check the drafter against and, with ``drop_heads``, to
    measure the acceptance with and without the heads over ``prompts`` (``tokens`` each).
    ``say`` hears each step. Returns what was written."""
    say = say or (lambda text: None)
    if not str(out).strip():
        raise DsparkError("--out is empty: give the export a new folder (e.g. --out ./exported)")
    out = Path(out).expanduser()
    check_verifier(verifier)
    check_name(out)
    p, config, _fmt = read_drafter_config(path)
    finish_killed(out, say)  # first: a folder it puts back is then checked as --out
    check_out(out, p, force)
    plan(read_source(p), fmt, verifier, drop_heads)  # a refusal before anything large is loaded
    if isinstance(target, (str, Path)):
        target = load_target(target, say=say)
    drafter = load_drafter(p, target, say=say)
    src = loaded_source(drafter, p, config)
    planned = plan(src, fmt, verifier, drop_heads)
    report = {
        "out": str(out),
        "format": fmt,
        "source": str(p),
        "source_format": src.format,
        "dropped": planned.dropped,
        "verifier": verifier,
    }
    if planned.dropped and target is not None:
        say(f"measuring the drafter with its heads on {len(prompts or [])} prompts ...")
        report["tau_with_heads"] = acceptance(target, drafter, prompts or [], tokens)
    for name in ("markov_head", "confidence_head") if planned.dropped else ():
        drafter.net.pop(name, None)
    with output(out) as tmp:
        write(tmp, drafter, planned)  # the README follows once the acceptance is known
        back = load_drafter(tmp, target)
        proj = target.projection if target is not None else ProbeProjection(src.spec.vocab, src.spec.hidden)
        differs = same_drafts(drafter, back, proj)
        if differs:
            raise DsparkError(
                f"the {fmt} export would not draft what the drafter drafts ({differs}): nothing was written"
            )
        if planned.dropped and target is not None:
            say("measuring the export without them ...")
            report["tau_without_heads"] = acceptance(target, back, prompts or [], tokens)
        report["acceptance"] = acceptance_words(report, len(prompts or []), tokens)
        info = {
            "source": str(p),
            "source_format": src.format,
            "block_size": drafter.block_size,
            "taps": list(drafter.tap_layers),
            "dropped": planned.dropped,
            "acceptance": report["acceptance"],
        }
        write_text(tmp / "README.md", serving.readme(fmt, planned.config, info, str(out), verifier=verifier))
    report["serve"] = serving.commands(fmt, planned.config, drafter.block_size, str(out), verifier=verifier)
    return report


def acceptance_words(report: dict, prompts: int, tokens: int) -> str:
    """What --drop-heads left: the measured acceptance, or how to measure it."""
    if not report["dropped"]:
        return ""
    if "tau_without_heads" in report:
        return (
            f"greedy tau {report['tau_without_heads']:.2f} without them against {report['tau_with_heads']:.2f} "
            f"with them ({prompts} prompts, {tokens} tokens each)"
        )
    return (
        f"the acceptance without them was not measured (no --target): measure it with dspark bench --target "
        f"TARGET --drafter {serving.quote(report['out'])} --prompt-set demo, beside the original drafter"
    )


def summary(r: dict, drop_heads: bool) -> str:
    """What an export wrote, in a sentence or two (the command's output, the app's status line)."""
    text = (
        f"wrote a {serving.TITLES[r['format']]} drafter to {r['out']} "
        f"(loaded back, it drafts what {r['source']} drafts)"
    )
    if r["dropped"]:
        text += f"; left out its {' and '.join(r['dropped'])} head{'s' * (len(r['dropped']) > 1)}: {r['acceptance']}"
    elif drop_heads:
        text += "; it has no Markov or confidence head, so nothing was left out"
    return text


__all__ = ["FORMATS", "ProbeProjection", "acceptance", "export_drafter", "exportable", "same_drafts", "summary"]
