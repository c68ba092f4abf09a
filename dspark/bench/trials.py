"""The benchmark's trials: the arms built from the options, a warm-up, then every arm on every
prompt in rotating order, each trial judged against its plain one (speed-up; for greedy runs
identical or lossless), appended as it finishes, and the summary kept (:func:`run`)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import time
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from .. import lossless, prompts, resources
from ..config import GenerationConfig
from ..errors import DsparkError
from ..files import output_dir, reason, write_text
from ..reading import kind_of_file
from . import contexts, report


def _prompts(a) -> tuple[dict, list[str]]:
    if a.prompts:
        s = prompts.read_set(Path(a.prompts))
    else:
        s = prompts.get(a.prompt_set or prompts.DEFAULT)
    texts = list(s.prompts[: a.prompt_count] if a.prompt_count else s.prompts)
    return {"key": s.key, "name": s.name, "description": s.description, "count": len(texts)}, texts


def _peer_python(a) -> str:
    python = (
        Path(a.peer_python) if a.peer_python else Path(__file__).resolve().parents[2] / ".venv-peers" / "bin" / "python"
    )
    if not python.exists():
        raise DsparkError(f"no peer Python at {python}: run `make peers` in the checkout, or give --peer-python")
    return str(python)


def build_arms(a, target, target_dir: str, config, *, say) -> tuple[list, dict]:
    """The arms, plain decoding first, and this machine's costs for each drafter."""
    from ..costs import load_or_measure  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..loading import load_drafter, read_drafter_config  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..policy import parse  # noqa: PLC0415 (not needed for --help)
    from . import arms  # noqa: PLC0415 (slow: mlx, not needed for --help)

    drafters = list(a.drafter)
    if (
        not drafters
        and Path(target_dir).resolve() == (resources.demo_model("target") or Path("/nonexistent")).resolve()
    ):
        drafters = resources.demo_drafters()
    if not drafters and not a.mlx_lm_draft:
        raise DsparkError("nothing to compare: give --drafter (or --mlx-lm-draft)")
    policies = a.policy or ["fixed", "auto"]
    for i, p in enumerate(policies):
        parse(p)
        if p in policies[:i]:
            raise DsparkError(f"--policy {p} is given twice: each policy is one arm per drafter, give it once")
    costs, speculative_arms = {}, []
    for d, name in zip(drafters, arm_names(drafters)):
        drafter = load_drafter(d, target, say=say)
        fmt = read_drafter_config(d)[2]
        # measured afresh: the limit and auto read them, and the machine may have changed since
        costs[name] = load_or_measure(target, drafter, drafter.block_size, remeasure=True, say=say)
        speculative_arms += [
            arms.Speculative(target, drafter, drafter_name=name, policy=p, config=config, costs=costs[name], kind=fmt)
            for p in policies
        ]
        speculative_arms += _peer_arms(
            a, target_dir=target_dir, drafter_dir=d, name=name, drafter=drafter, fmt=fmt, say=say
        )
    if a.mlx_lm_draft:
        from ..loading import load_target  # noqa: PLC0415 (slow: mlx, not needed for --help)

        draft = load_target(a.mlx_lm_draft, say=say)
        speculative_arms.append(
            arms.MlxLmDraft(
                target, draft.model, draft_name=Path(a.mlx_lm_draft).name, block_size=a.mlx_lm_num_draft, config=config
            )
        )
    step = next((c.threads.get("step") for c in costs.values() if c is not None and c.threads), None)
    return [arms.Plain(target, config, arms.plain_thread_choices(), first=step), *speculative_arms], costs


#: (peer, drafter format) pairs the peers read; mlx-vlm is asked about every format but dspark's own
PEER_READS = {
    ("dflash", "zlab-dflash"),
    ("dflash-mlx", "zlab-dflash"),
    ("mlx-dspark", "deepspec"),
    ("mlx-dspark", "speculators"),
}


def _peer_arms(a, *, target_dir: str, drafter_dir: str, name: str, drafter, fmt: str, say) -> list:
    """The ``--peer`` arms of one drafter (of format ``fmt``, its arms named ``name``): a peer
    that does not read the format, or (mlx-vlm) cannot load or run it, is one sentence and no arm."""
    from . import arms  # noqa: PLC0415 (slow: mlx, not needed for --help)

    out = []
    for peer in a.peer:
        if peer == "mlx-vlm" and fmt == "dspark-drafter":
            say(f"mlx-vlm does not read {name} (this project's own dspark-drafter format): no mlx-vlm arm for it")
            continue
        if peer != "mlx-vlm" and (peer, fmt) not in PEER_READS:
            say(f"the {peer} peer does not read {name} ({fmt} format): no {peer} arm for it")
            continue
        try:
            out.append(
                arms.Peer(
                    peer,
                    python=_peer_python(a),
                    target_dir=target_dir,
                    drafter_dir=drafter_dir,
                    drafter_name=name,
                    block_size=drafter.block_size,
                    kind=fmt,
                    drafter_kind=fmt if peer == "mlx-vlm" else "",
                )
            )
        except RuntimeError as e:
            if peer != "mlx-vlm":
                raise
            say(f"mlx-vlm cannot run {name} ({fmt} format): {e}; no mlx-vlm arm for it")
    return out


def arm_names(drafters: list[str]) -> list[str]:
    """Each ``--drafter``'s name in its arms: its folder's name, with as many of the folders
    above it as tell two drafters of one name apart (``a/drafter``, ``b/drafter``): arms and
    costs are keyed by it, and two of one name would count one drafter's trials twice. The same
    folder given twice is refused."""
    where = [Path(os.path.abspath(Path(d).expanduser())) for d in drafters]  # links kept: the name typed
    same = [Path(d).expanduser().resolve() for d in drafters]
    for i, r in enumerate(same):
        if r in same[:i]:
            raise DsparkError(
                f"--drafter {drafters[i]} is given twice (the same folder as --drafter {drafters[same.index(r)]}): "
                f"give each drafter once"
            )
    tail = lambda p, k: "/".join(p.parts[-k:])
    names = []
    for i, p in enumerate(where):
        k = 1
        while k < len(p.parts) and any(tail(o, k) == tail(p, k) for j, o in enumerate(where) if j != i):
            k += 1
        names.append(tail(p, k))
    return names


def _verdict(target, *, trial: dict, plain: dict, plain_runs: dict, key, config, prompt: list[int]) -> dict:
    """identical / lossless / first_difference of a greedy ``trial`` (of ``prompt``'s ids) against
    the paired ``plain`` one, judged by plain decoding's own log-probabilities under ``config``,
    computed once per ``key`` and kept in ``plain_runs``."""
    if trial["token_ids"] == plain["token_ids"]:
        return {"identical": True, "lossless": True}
    from ..engine import generate_plain, run_to_summary  # noqa: PLC0415 (slow: mlx, not needed for --help)

    if key not in plain_runs:  # plain decoding's own log-probabilities, once per prompt
        c = replace(config, max_tokens=len(plain["token_ids"]), stop_at_eos=False)
        plain_runs[key] = run_to_summary(generate_plain(target, prompt, c))
    # the target's own evaluations judge a difference (lossless.compare): a peer is judged alike
    speculative = SimpleNamespace(tokens=trial["token_ids"], token_logprobs=trial.get("token_logprobs") or [])
    v = lossless.compare(target, speculative, plain_runs[key])
    return {"identical": False, "lossless": v.lossless, "first_difference": v.first_difference.to_dict()}


def run(a, say) -> dict:
    """``dspark bench`` with the options ``a`` (as its parser gives them, checked): load and check
    every input, then measure (:func:`_measure`) and write ``summary.json`` beside the trials;
    returns the summary. ``--out`` is this run's alone while it runs (:func:`only_writer`)."""
    target_dir = a.target or (str(resources.demo_model("target")) if resources.demo_model("target") else None)
    if target_dir is None:
        raise DsparkError("no --target given and no demo target in resources/demo/target")
    new = not Path(a.out).expanduser().exists()
    out = output_dir(a.out, allow_existing=True)
    try:
        with only_writer(out):
            check_results(out, a.force)
            return _run(a, say, out=out, target_dir=target_dir)
    except DsparkError:
        if new and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a run refused for its inputs leaves no empty --out of its own making
        raise


def _run(a, say, *, out: Path, target_dir: str) -> dict:
    """:func:`run` once ``out`` is this process's alone and may be written."""
    from ..engine import prompt_ids  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..hub import resolve  # noqa: PLC0415 (not needed for --help)
    from ..loading import load_target  # noqa: PLC0415 (slow: mlx, not needed for --help)

    prompt_info, texts = _prompts(a)
    target_dir = str(resolve(target_dir, say=say))
    target = load_target(target_dir, say=say)
    config = GenerationConfig(max_tokens=a.max_tokens, temperature=a.temperature, stop_at_eos=False)
    config.check(target.dims.vocab_size)
    ids = [prompt_ids(target, t, config) for t in texts]
    lengths = contexts.parse(a.context) if a.context else [None]
    if a.context:  # before the long prompts are built and any cost is measured
        contexts.check_fits(target, lengths[-1], a.max_tokens)
    ids_at = {L: contexts.padded(target, ids, L) if L else ids for L in lengths}
    for L in lengths[-1:] if a.context else []:
        prompt_ids(target, ids_at[L][0], config)  # one that the target cannot hold is refused now, before any trial
    arm_list, costs = build_arms(a, target, target_dir, config, say=say)
    # Only now, with every input loaded and checked, are the results --force replaces removed: a
    # mistyped --target or drafter loses nothing.
    for f in RESULTS:
        (out / f).unlink(missing_ok=True)
    doc = {
        "command": shlex.join(["dspark", "bench", *getattr(a, "argv", [])]),
        "environment": report.environment(),
        "target": target_dir,
        "prompts": prompt_info,
        "settings": {
            "max_tokens": a.max_tokens,
            "repeats": a.repeats,
            "temperature": a.temperature,
            "contexts": lengths if a.context else None,
        },
        "costs": {k: c.to_dict() for k, c in costs.items()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    try:
        log = report.TrialLog(out)
    except OSError as e:  # nothing measured yet: nothing to keep elsewhere, and no empty file left
        for f in RESULTS:
            with suppress(OSError):
                (out / f).unlink(missing_ok=True)
        raise DsparkError(f"could not write {out / 'trials.csv'} ({reason(e)}): nothing was measured") from None
    trials: list[dict] = []
    try:
        for arm in arm_list:  # warm-up: kernels compiled, caches filled, nothing recorded
            arm.trial(ids[0], min(16, a.max_tokens), 0)
        bar = _bar(a, a.repeats * len(ids) * len(arm_list) * len(lengths))
        _measure(
            a, target, config, arm_list=arm_list, costs=costs, ids_at=ids_at, doc=doc, bar=bar, log=log, trials=trials
        )
        if bar:
            bar.close()
    except KeyboardInterrupt:
        doc["interrupted"] = True
        say("interrupted: the summary covers the trials that finished")
    except _WriteFailed as e:
        doc["interrupted"] = True
        doc["write_failed"] = reason(e.error)
        say(f"could not write {out / 'trials.jsonl'} ({reason(e.error)}): the benchmark stops here")
    finally:
        log.close()
        for arm in arm_list:
            if hasattr(arm, "close"):
                arm.close()
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    doc["environment"].update(report.plain_threads(trials, doc["environment"].get("blas_threads")))
    doc["arms"] = report.summarize(trials)
    keep(doc, trials, out)
    return doc


def _measure(
    a, target, config, *, arm_list: list, costs: dict, ids_at: dict, doc: dict, bar, log, trials: list
) -> None:
    """Every arm on every prompt (of ``ids_at``: prompt ids by context length), ``a.repeats``
    times, the arms' order rotating so none always runs first; each group of trials is judged
    against its plain one and appended to ``trials`` and ``log`` as it finishes, so an interrupt
    keeps what was measured. The isolated costs are measured again in every repeat at the
    thread counts of ``costs`` and kept in ``doc``; ``bar`` (or None) counts the trials."""
    from ..costs import measure  # noqa: PLC0415 (slow: mlx, not needed for --help)

    plain_runs: dict = {}
    drafters = {arm.drafter: arm.model for arm in arm_list if hasattr(arm, "model")}
    doc["costs_by_repeat"] = []
    for L, at in ids_at.items():
        # at the trials' mean context (a verify over a longer cache costs more): prompt + half the output
        context = round(sum(map(len, at)) / len(at) + a.max_tokens / 2)
        doc["costs_context"] = context
        for r in range(a.repeats):
            # The isolated costs the limit divides by, measured again in every repeat (at the
            # thread counts chosen at the start), so they share the trials' load.
            if bar:
                bar.set_description(f"repeat {r + 1}/{a.repeats}: isolated costs")
            now = {
                name: measure(target, d, d.block_size, contexts=(context,), repeats=3, threads=costs[name].threads)
                for name, d in drafters.items()
            }
            doc["costs_by_repeat"].append({k: c.to_dict() for k, c in now.items()})
            for p, prompt in enumerate(at):
                shift = (r * len(at) + p) % len(arm_list)
                group = {}
                for arm in arm_list[shift:] + arm_list[:shift]:
                    if bar:
                        bar.set_description(
                            f"{f'{L} tokens, ' if L else ''}repeat {r + 1}/{a.repeats} prompt "
                            f"{p + 1}/{len(at)} {arm.name}"
                        )
                    rec = arm.trial(prompt, a.max_tokens, seed=r)
                    group[arm.name] = {
                        "arm": arm.name,
                        **({"kind": arm.kind} if arm.kind else {}),
                        "drafter": arm.drafter,
                        "policy": arm.policy,
                        "repeat": r,
                        "prompt_index": p,
                        **({"context": L} if L else {}),
                        **rec,
                    }
                    if bar:
                        bar.update(1)
                _judge(
                    a,
                    target,
                    config,
                    arm_list=arm_list,
                    group=group,
                    now=now,
                    plain_runs=plain_runs,
                    key=(L, p),
                    repeat=r,
                    prompt=prompt,
                    log=log,
                    trials=trials,
                )


def _judge(
    a,
    target,
    config,
    *,
    arm_list: list,
    group: dict,
    now: dict,
    plain_runs: dict,
    key,
    repeat: int,
    prompt: list[int],
    log,
    trials: list,
) -> None:
    """Derive each trial of one ``group`` (by arm name) against the group's plain trial
    (speed-up, with the isolated costs ``now``; for greedy runs whether it was identical or
    lossless, plain decoding of ``prompt`` kept in ``plain_runs`` by ``key``, seeded by
    ``repeat``) and record it in ``trials`` and ``log``."""
    plain = group[report.PLAIN]
    for arm in arm_list:
        t = report.derive(group[arm.name], plain if arm.name != report.PLAIN else None, now.get(arm.drafter))
        if arm.name != report.PLAIN and a.temperature == 0:
            t.update(
                _verdict(
                    target,
                    trial=t,
                    plain=plain,
                    plain_runs=plain_runs,
                    key=key,
                    config=replace(config, seed=repeat),
                    prompt=prompt,
                )
            )
        for k in ("token_logprobs", "prompt_tokens"):
            t.pop(k, None)
        trials.append(t)
        try:
            log.add(t)
        except OSError as e:
            raise _WriteFailed(e) from None


#: What a benchmark writes into --out; --force replaces these and nothing else.
RESULTS = ("trials.jsonl", "trials.csv", "summary.json")
#: Held by the run writing into a folder (``fcntl.flock``: the system lets go when the process ends).
LOCK_FILE = ".dspark-bench.lock"


def check_results(out: Path, force: bool) -> None:
    """Refuse ``out`` when it holds results (any of :data:`RESULTS`) and not ``force``, or when
    one of those names is a folder or a special file, which --force would not remove either."""
    held = []
    for name in RESULTS:
        path = out / name
        try:
            mode = os.stat(path).st_mode if os.path.lexists(path) else None
        except OSError:
            mode = None  # a dangling link: unlinked like a file
        if mode is not None and not stat.S_ISREG(mode):
            raise DsparkError(
                f"{path} is {kind_of_file(mode)}, not a file dspark bench wrote: move it away, or choose another --out"
            )
        if os.path.lexists(path):
            held.append(name)
    if held and not force:
        raise DsparkError(
            f"{out} already holds benchmark results (use --force to replace them: {', '.join(held)}; or choose "
            f"another --out)"
        )


@contextmanager
def only_writer(out: Path):
    """``out`` for this process alone while the block runs: a second ``dspark bench`` into the
    same folder is refused in one sentence, never left to append to the same trials. The lock
    file holds the owner's process id, for that sentence, and goes when the block ends."""
    import fcntl  # noqa: PLC0415 (POSIX, as MLX is; only when a benchmark writes)

    path = out / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise DsparkError(f"cannot write in {out} ({reason(e)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (process {holder})" if holder.isdigit() else ""
            raise DsparkError(
                f"another dspark bench{who} is writing to {out}: wait for it to end, or choose another --out"
            ) from None
        except OSError:  # a file system without locks (some network ones): unguarded, as before
            break
        try:  # the file the lock is on may have been removed by its last owner in the meantime
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as e:
            raise DsparkError(f"cannot write in {out} ({reason(e)})") from None
        yield
    finally:
        with suppress(OSError):
            os.unlink(path)
        os.close(fd)


class _WriteFailed(Exception):
    """A trial could not be appended to the output folder (a full disk): the run stops there."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


def keep(doc: dict, trials: list[dict], out: Path) -> None:
    """Write ``summary.json``, or, when the output folder cannot take it (a full disk), keep what
    was measured elsewhere and say where, in one sentence (DsparkError): the summary and every
    trial in a folder under the system's temporary directory, else the trials the output folder
    already holds."""
    import tempfile  # noqa: PLC0415 (only when the output folder is full; dspark --help loads none of it)

    try:
        write_text(out / "summary.json", json.dumps(doc, indent=1))
        if "write_failed" not in doc:
            return
        failed = f"could not write every trial to {out} ({doc['write_failed']})"
    except DsparkError as e:
        failed = str(e)
    kept = len(report.read_trials(out))
    try:
        spare = Path(tempfile.mkdtemp(prefix="dspark-bench-"))
        write_text(spare / "summary.json", json.dumps(doc, indent=1))
        write_text(spare / "trials.jsonl", "".join(json.dumps(t) + "\n" for t in trials))
    except (DsparkError, OSError):
        raise DsparkError(
            f"{failed}; {kept} of the {len(trials)} trials measured are in {out / 'trials.jsonl'}, and "
            f"nothing else could be written anywhere"
        ) from None
    raise DsparkError(f"{failed}; the summary and all {len(trials)} trials measured are kept in {spare}")


def _bar(a, total: int):
    if a.no_progress:
        return None
    from tqdm import tqdm  # noqa: PLC0415 (slow: tqdm, not needed for --help)

    return tqdm(total=total, unit="trial", file=sys.stderr, leave=False)


__all__ = ["build_arms", "keep", "run"]
