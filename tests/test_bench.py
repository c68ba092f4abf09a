"""``dspark bench`` on tiny models: the files it writes, the figures it derives (checked on
hand-made trials), the peer arms, an interrupted run, the plots and its refusals."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import drafter_checkpoints as ckpt
import pytest

from dspark.bench import report
from dspark.cli import main
from dspark.costs import Costs

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers" / "bin" / "python"
ARM_KEYS = [
    "tokens_per_sec",
    "speedup",
    "tau",
    "acceptance_rate",
    "per_position_acceptance",
    "accepted_histogram",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
    "step_ms",
    "limit",
    "efficiency",
    "ttft_seconds",
    "peak_memory_bytes",
    "identical",
    "drafter",
    "policy",
]
ENV_KEYS = ["os", "cpu", "mlx", "device", "blas", "blas_threads", "git", "python", "plain_blas_threads"]


pytestmark = pytest.mark.usefixtures("costs_measured_once")  # benchmarks need costs; test_costs tests measuring


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    model = ckpt.target_model()
    d = {"target": ckpt.write_target(root / "target", model), "zlab": ckpt.write_zlab(root / "zlab")}
    assert (
        main(
            [
                "init",
                "--target",
                str(d["target"]),
                "--out",
                str(root / "native"),
                "--block-size",
                "4",
                "--layers",
                "1",
                "--markov-rank",
                "16",
            ]
        )
        == 0
    )
    d["native"] = root / "native"
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps([" ".join(f"t{i}" for i in ckpt.PROMPT[:12]), "t7 t45 t45 t200 t13"]))
    d["prompts"] = prompts
    return d


@pytest.fixture(scope="module")
def auto_bench(dirs, tmp_path_factory, costs_measured_once):
    """One bench of the auto policy (a repeat each), shared by the tests that only read it or
    need a folder that holds results."""
    out = tmp_path_factory.mktemp("auto_bench") / "out"
    assert bench(dirs, out, "--policy", "auto", "--repeats", "1") == 0
    return out


@pytest.fixture(scope="module")
def kinds(dirs):
    """A drafter of each kind issue #40 added, on the bench's target: Google's Gemma-4 assistant
    and an EAGLE-3 head (autoregressive: a step a token), and a DFlash 2 head (a block; its
    runtime block 5 slots, so 4 drafts); the EAGLE-3 head over the whole vocabulary, where
    mlx-vlm's verifier is plain greedy's but its cache rollback, once a sliding window has
    filled, is not (test_eagle3.py shows both)."""
    import assistant_checkpoints as ac
    import dflash2_checkpoints as d2
    import eagle3_checkpoints as e3

    root = Path(dirs["target"]).parent
    model = ckpt.target_model()
    table = model.model.embed_tokens.weight
    return {
        "assistant": ac.write(root / "assistant", Path(dirs["target"]), dtype="float32"),
        "eagle3": e3.write_eagle3(
            root / "eagle3", table, [], num_target_layers=6, aux_ids=[1, 3, 4], draft_vocab=ckpt.VOCAB, block=4
        ),
        "dflash2": d2.write_dflash2(root / "dflash2", runtime=5),
    }


def bench(dirs, out, *extra):
    return main(
        [
            "bench",
            "--target",
            str(dirs["target"]),
            "--drafter",
            str(dirs["native"]),
            "--drafter",
            str(dirs["zlab"]),
            "--prompts",
            str(dirs["prompts"]),
            "--max-tokens",
            "24",
            "--repeats",
            "2",
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]
    )


def test_bench_writes_every_trial_and_the_figures_of_every_arm(dirs, tmp_path, capsys, monkeypatch):
    from dspark import blas

    # dspark.blas loads OpenBLAS on Linux only (sys.platform); on a Mac, or with DSPARK_NO_OPENBLAS,
    # there is no BLAS thread count to choose, and the bench must not pretend there is
    openblas = blas.loaded_path() is not None
    if openblas:  # two cores, however many run the tests (one thread set, or one core)
        monkeypatch.setattr(blas, "default_threads", lambda: 2)
    out = tmp_path / "out"
    assert bench(dirs, out, "--policy", "fixed:2", "--policy", "auto", "--mlx-lm-draft", str(dirs["target"])) == 0
    table = capsys.readouterr().out
    names = ["plain", "native fixed:2", "native auto", "zlab fixed:2", "zlab auto", "mlx-lm draft target"]
    assert all(n in table for n in names)
    trials = report.read_trials(out)
    assert len(trials) == 2 * 2 * len(names)  # repeats x prompts x arms, each once
    assert len(list(csv.DictReader((out / "trials.csv").open()))) == len(trials)
    doc = json.loads((out / "summary.json").read_text())
    assert [a["arm"] for a in doc["arms"]] == names
    for arm in doc["arms"][1:5]:
        missing = [k for k in ARM_KEYS if k not in arm]
        assert not missing, (arm["arm"], missing)
        assert arm["identical"] == arm["compared"] == 4  # float32 target: every output is plain decoding's
        assert 0 < arm["efficiency"] < 5 and arm["tau"] >= 1
    assert not [k for k in ENV_KEYS if k not in doc["environment"]]
    assert set(doc["costs"]) == {"native", "zlab"} and len(doc["costs"]["native"]["verify_ms"]) == 5
    # mlx-lm's draft model is the target itself: every draft is accepted
    peer = doc["arms"][5]
    assert peer["identical"] == 4 and peer["acceptance_rate"] == 1.0
    # with OpenBLAS on several cores, plain decoding ran at one BLAS thread and at all of them in
    # every trial, judged at the count its earlier trials chose; without OpenBLAS (not Linux) it
    # ran once, as it is
    plain = [t for t in trials if t["arm"] == "plain"]
    if openblas:
        assert all(set(t["tokens_per_sec_by_threads"]) == {"1", "2"} for t in plain)
        assert all(
            t["tokens_per_sec"] == pytest.approx(t["tokens_per_sec_by_threads"][str(t["blas_threads"])]) for t in plain
        )
        assert doc["environment"]["plain_blas_threads"] in (1, 2)
    else:
        assert not [t for t in plain if "tokens_per_sec_by_threads" in t]


def test_plain_decoding_is_judged_at_the_count_its_earlier_trials_found_faster(monkeypatch):
    """Each trial runs every count; its figure is the run at the count faster by median over the
    earlier trials like it (same prompt length and tokens, else same tokens), never the faster run
    of the trial itself (the faster of two noisy runs is biased high); the first at ``first``."""
    from dspark.bench import arms

    rates = iter([{1: 100, 2: 90}, {1: 80, 2: 95}, {1: 100, 2: 90}, {1: 90, 2: 100}, {1: 50, 2: 60}, {1: 70, 2: 60}])
    now: dict = {}

    def run(self, ids, max_tokens, seed, threads):
        if threads == 1:
            now.update(next(rates))
        return {"tokens": max_tokens, "decode_seconds": max_tokens / now[threads]}

    monkeypatch.setattr(arms.Plain, "_run", run)
    plain = arms.Plain(None, None, [1, 2], first=2)
    got = [plain.trial([0] * n, 100, seed=0) for n in (64, 64, 64, 64)]
    # the costs' count first, then the earlier trials' medians: 1 (100 vs 90), 2 (90 vs 92.5), 1 (100 vs 90)
    assert [t["blas_threads"] for t in got] == [2, 1, 2, 1]
    # not the faster run of each trial (100, 95, 100, 100)
    assert [round(t["tokens"] / t["decode_seconds"]) for t in got] == [90, 80, 90, 90]
    assert plain.trial([0] * 3000, 100, seed=1)["blas_threads"] == 1  # a new length: trials of the same tokens
    assert plain.trial([0] * 64, 16, seed=0)["blas_threads"] == 2  # the warm-up's count: no earlier trial of 16


def test_bench_under_a_load_it_runs_itself(dirs, tmp_path, capsys, monkeypatch):
    """--load N: N busy processes beside the trials, ended with them, and said with the results."""
    from dspark.bench import busy

    started = []
    real = busy.load

    def watched(n):
        started.append(n)
        return real(n)

    monkeypatch.setattr(busy, "load", watched)
    out = tmp_path / "loaded"
    assert bench(dirs, out, "--policy", "fixed:2", "--load", "1") == 0
    assert started == [1] and busy.running() == 0
    assert "1 busy processes beside the trials (--load)" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["environment"]["busy_processes"] == 1
    for bad in ("-1", str(busy.MOST + 1)):
        assert bench(dirs, tmp_path / f"o{bad}", "--load", bad) == 2
        assert "--load must be between 0 and" in capsys.readouterr().err


def test_plain_decoding_runs_every_thread_count_in_turn_and_reports_the_count_judged(monkeypatch):
    """Every plain trial runs at each BLAS thread count, the first count alternating between
    trials; here count 2 is judged both times (the first trial without earlier ones takes all
    cores, the second the count trial 1 found faster), and the report says how often each was."""
    from dspark.bench import arms

    seconds = iter(
        [2.0, 1.0, 1.0, 3.0]
    )  # trial 1: 1 thread 2 s, 2 threads 1 s; trial 2 (order reversed): 2 threads 1 s, 1 thread 3 s
    ran = []

    def fake_run(self, ids, max_tokens, seed, threads):
        ran.append(threads)
        return {
            "tokens": 10,
            "token_ids": [threads] * 10,
            "decode_seconds": next(seconds),
            "ttft_seconds": 0.0,
            "peak_memory_bytes": 0,
        }

    monkeypatch.setattr(arms.Plain, "_run", fake_run)
    plain = arms.Plain(None, None, [1, 2])
    first, second = plain.trial([1], 10, seed=0), plain.trial([1], 10, seed=1)
    assert ran == [1, 2, 2, 1]
    assert first["blas_threads"] == 2 and first["decode_seconds"] == 1.0 and first["token_ids"] == [2] * 10
    assert second["blas_threads"] == 2 and second["tokens_per_sec_by_threads"] == {"2": 10.0, "1": 10 / 3}
    trials = [{"arm": "plain", **first}, {"arm": "plain", **second}]
    assert report.plain_threads(trials)["plain_blas_threads"] == 2
    assert report.plain_threads(trials)["plain_trials_judged_by_threads"] == {"2": 2}


def test_figures_are_derived_as_documented():
    plain = {"arm": "plain", "tokens": 100, "decode_seconds": 1.0}
    spec = {
        "arm": "d fixed",
        "tokens": 100,
        "decode_seconds": 0.5,
        "rounds": 25,
        "accepted": [3] * 25,
        "widths": [4] * 25,
        "draft_seconds": 0.2,
        "verify_seconds": 0.25,
    }
    costs = Costs(verify_ms=(5.0, 6.0, 7.0, 8.0, 9.0), draft_ms=6.0, step_ms=9.0)
    t = report.derive(spec, plain, costs)
    assert t["tokens_per_sec"] == 200 and t["speedup"] == 2.0 and t["tau"] == 4.0
    assert (t["draft_ms"], t["verify_ms"]) == (8.0, 10.0) and t["overhead_ms"] == pytest.approx(2.0)
    assert t["step_ms"] == 10.0 and t["limit"] == pytest.approx(4 * 10 / (6 + 9))
    assert t["efficiency"] == pytest.approx(2.0 / t["limit"]) and t["in_loop"] == pytest.approx(18 / 20)
    assert t["per_position_acceptance"] == [1.0, 1.0, 1.0, 0.0]
    s = report.summarize_arm([t, {**t, "speedup": 1.0}, {**t, "speedup": 3.0}])
    assert s["speedup"] == 2.0 and s["speedup_spread"]["min"] == 1.0 and s["rounds"] == 75
    # auto with plain steps: a round's figures are the rounds' own, and the limit prices a plain
    # step at plain decoding's step (rounds: 10 of tau 4, 60 plain steps taking 0.3 s)
    auto = {
        "arm": "d auto",
        "tokens": 100,
        "decode_seconds": 0.6,
        "rounds": 10,
        "accepted": [3] * 10,
        "widths": [4] * 10,
        "draft_seconds": 0.08,
        "verify_seconds": 0.1,
        "plain_steps": 60,
        "plain_seconds": 0.3,
    }
    a = report.derive(auto, plain, costs)
    assert a["tau"] == 4.0 and (a["draft_ms"], a["verify_ms"]) == pytest.approx((8.0, 10.0))
    assert a["overhead_ms"] == pytest.approx(12.0) and a["in_loop"] == pytest.approx(18 / 30)
    assert a["limit"] == pytest.approx(100 * 10 / (10 * 15 + 60 * 10))


def test_an_autoregressive_drafter_s_figures_price_each_drafted_token():
    """An autoregressive drafter pays ``draft_ms`` for its first token and ``draft_steps_ms`` for
    the further ones: the limit prices each round's draft by the tokens it drafted, not a block's
    one forward; a peer's trial, which has no drafted counts, drafted what it verified."""
    plain = {"arm": "plain", "tokens": 100, "decode_seconds": 1.0}
    costs = Costs(verify_ms=(5.0, 6.0, 7.0, 8.0, 9.0), draft_ms=2.0, draft_steps_ms=(1.5,), step_ms=9.0)
    spec = {
        "arm": "a fixed:3",
        "tokens": 100,
        "decode_seconds": 0.5,
        "rounds": 40,
        "accepted": [1, 2] * 20,
        "widths": [2, 2] * 20,
        "drafted_per_round": [2, 3] * 20,  # a policy may verify fewer than were drafted
        "draft_seconds": 0.1,
        "verify_seconds": 0.25,
    }
    t = report.derive(spec, plain, costs)
    assert t["tau"] == 2.5 and t["drafted"] == 2.5 and t["draft_token_ms"] == pytest.approx(100 / 100)
    ideal = ((2 + 1.5 + 7) + (2 + 3.0 + 7)) / 2  # drafts of 2 and of 3 tokens, each verified at width 2
    assert t["limit"] == pytest.approx(2.5 * 10 / ideal)
    block = report.derive(spec, plain, Costs(verify_ms=costs.verify_ms, draft_ms=2.0, step_ms=9.0))
    assert block["limit"] == pytest.approx(2.5 * 10 / (2 + 7))  # a block drafter: one forward a round
    peer = report.derive({**spec, "drafted_per_round": None}, plain, costs)
    assert peer["drafted"] == 2 and peer["limit"] == pytest.approx(2.5 * 10 / (2 + 1.5 + 7))
    s = report.summarize_arm([t, peer])
    assert s["drafted"] == pytest.approx(2.25) and s["draft_token_ms_spread"]["n"] == 2


def test_every_drafter_kind_runs_under_several_fixed_counts_and_auto_in_one_run(dirs, kinds, tmp_path, capsys):
    """The Gemma-4 assistant, EAGLE-3 and DFlash 2 under fixed:1, fixed:3 and auto in one run:
    every output plain decoding's, each row naming its kind; an autoregressive drafter drafts
    exactly what fixed:K asks (a block drafter its whole block) and its costs price a step per
    token."""
    out = tmp_path / "out"
    args = [a for k in ("assistant", "eagle3", "dflash2") for a in ("--drafter", str(kinds[k]))]
    assert (
        main(
            [
                "bench",
                "--target",
                str(dirs["target"]),
                *args,
                "--prompts",
                str(dirs["prompts"]),
                "--max-tokens",
                "24",
                "--repeats",
                "1",
                *("--policy", "fixed:1", "--policy", "fixed:3", "--policy", "auto"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    fmt = {"assistant": "gemma4-assistant", "eagle3": "eagle3", "dflash2": "dflash2"}
    for name, kind in fmt.items():
        rows = [line for line in table.splitlines() if line.startswith(f"{name} ")]
        assert len(rows) == 3 and all(kind in r.split() for r in rows), rows
    doc = json.loads((out / "summary.json").read_text())
    arms = {a["arm"]: a for a in doc["arms"]}
    assert len(arms) == 1 + 3 * 3
    for name, kind in fmt.items():
        for policy in ("fixed:1", "fixed:3", "auto"):
            arm = arms[f"{name} {policy}"]
            assert arm["kind"] == kind and arm["identical"] == arm["compared"] == 2, arm
            assert arm["limit"] > 0 and (arm["draft_token_ms"] > 0 if arm.get("rounds") else policy == "auto")
    steps = {name: doc["costs"][name]["draft_steps_ms"] for name in fmt}
    # an autoregressive head's further tokens are priced from whole rounds less the verify's growth,
    # which for heads this small can be all of it (test_costs checks that rule); a block is one forward
    assert all(x >= 0 for x in steps["assistant"] + steps["eagle3"]) and steps["dflash2"] == []
    assert len(steps["assistant"]) == len(steps["eagle3"]) == 3  # block size 4: each of the 2nd to 4th tokens
    assert all(doc["costs"][name]["draft_ms"] > 0 for name in fmt)
    trials = report.read_trials(out)
    for t in trials:
        if t["arm"] == "plain" or not t.get("rounds"):
            continue
        drafted, widths = t["drafted_per_round"], t["widths"]
        k = {"fixed:1": 1, "fixed:3": 3}.get(t["policy"])
        if t["kind"] == "dflash2":  # a block: every slot drafted, the policy verifies a prefix
            assert set(drafted) == {4} and (k is None or max(widths) <= k)
        elif k is not None:  # a step a token: as many as the policy asks, or as the output has room for
            left = [t["tokens"] - sum(a + 1 for a in t["accepted"][:i]) for i in range(len(drafted))]
            assert drafted == widths == [min(k, n - 1) for n in left] and max(drafted) == k
        else:
            assert all(1 <= d <= 4 for d in drafted) and all(w <= d for w, d in zip(widths, drafted))


def test_an_interrupted_bench_keeps_the_trials_that_finished(dirs, tmp_path, monkeypatch, capsys):
    from dspark.bench import arms

    calls = {"n": 0}
    real = arms.Speculative.trial

    def stop_after_a_while(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] > 6:  # the warm-ups (2 arms), then a few trials
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(arms.Speculative, "trial", stop_after_a_while)
    out = tmp_path / "out"
    assert bench(dirs, out, "--policy", "fixed") == 0
    doc = json.loads((out / "summary.json").read_text())
    assert doc["interrupted"] is True and "interrupted" in capsys.readouterr().err
    kept = report.read_trials(out)
    assert kept and len(kept) == sum(a["trials"] for a in doc["arms"])


def test_an_arm_whose_output_differs_is_judged_without_its_prompt(dirs, tmp_path, monkeypatch):
    """A peer's record carries only its tokens: a difference from plain decoding is judged from
    the prompt the benchmark gave it (it once raised KeyError: 'prompt_tokens')."""
    from dspark.bench import arms

    real = arms.Speculative.trial

    def like_a_peer_that_errs(self, ids, max_tokens, seed):
        rec = real(self, ids, max_tokens, seed)
        rec.pop("prompt_tokens"), rec.pop("token_logprobs")
        rec["token_ids"] = rec["token_ids"][:-1] + [(rec["token_ids"][-1] + 1) % 64]
        return rec

    monkeypatch.setattr(arms.Speculative, "trial", like_a_peer_that_errs)
    out = tmp_path / "out"
    assert bench(dirs, out, "--policy", "fixed", "--repeats", "1") == 0
    arm = json.loads((out / "summary.json").read_text())["arms"][1]
    assert arm["identical"] == 0 and arm["compared"] == 2 and arm["lossless"] == 0


def test_plots_are_drawn_by_the_app(auto_bench, tmp_path):
    """The library never runs the app: the bench says which app command draws its figures."""
    import os
    import subprocess
    import sys

    pytest.importorskip("pyqtgraph")
    out = auto_bench
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run(
        [sys.executable, "-m", "dspark_studio", "--bench-figures", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    from PySide6.QtGui import QImage

    for name in ("speedup", "acceptance", "costs"):
        img = QImage(str(out / f"{name}.png"))
        assert (img.width(), img.height()) == (1200, 700), name
    bad = tmp_path / "bad"  # a summary the app would refuse is refused here too, in one line
    bad.mkdir()
    (bad / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    r = subprocess.run(
        [sys.executable, "-m", "dspark_studio", "--bench-figures", str(bad)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and r.stderr.startswith("figures: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bench_refusals_are_one_line(dirs, auto_bench, tmp_path, capsys):
    capsys.readouterr()
    assert bench(dirs, auto_bench, "--policy", "fixed") == 2
    assert "already holds benchmark results (use --force" in capsys.readouterr().err
    assert bench(dirs, tmp_path / "o2", "--policy", "sometimes") == 2
    assert "is not a verify policy" in capsys.readouterr().err
    assert (
        main(
            ["bench", "--target", str(dirs["target"]), "--prompts", str(dirs["prompts"]), "--out", str(tmp_path / "o3")]
        )
        == 2
    )
    assert "nothing to compare: give --drafter" in capsys.readouterr().err


@pytest.mark.skipif(os.environ.get("DSPARK_SKIP_PEERS") is not None, reason="DSPARK_SKIP_PEERS is set")
def test_the_dflash_peer_runs_the_same_drafter_in_the_same_run(dirs, tmp_path, capsys):
    assert PEERS.exists(), "the peer environment is missing: run `make peers` (make test does)"
    out = tmp_path / "out"
    assert (
        main(
            [
                "bench",
                "--target",
                str(dirs["target"]),
                "--drafter",
                str(dirs["zlab"]),
                "--prompts",
                str(dirs["prompts"]),
                "--max-tokens",
                "40",
                "--repeats",
                "1",
                "--policy",
                "fixed",
                "--peer",
                "dflash",
                "--peer",
                "dflash-mlx",
                "--peer",
                "mlx-dspark",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    err, table = captured.err, captured.out
    assert "the mlx-dspark peer does not read zlab (zlab-dflash format)" in err
    doc = json.loads((out / "summary.json").read_text())
    ours, theirs = doc["arms"][1], doc["arms"][2]
    assert theirs["arm"] == "dflash zlab" and theirs["identical"] == theirs["compared"] == 2
    # the same drafter and target (the peer drafts from the token after the prompt pass, one
    # position later than this engine, so the rounds are shifted, not the same)
    assert theirs["tau"] == pytest.approx(ours["tau"], rel=0.1) and theirs["speedup"] > 0
    other = doc["arms"][3]  # bstnxbt's dflash-mlx, the same z-lab head
    assert other["arm"] == "dflash-mlx zlab" and other["identical"] == other["compared"] == 2
    assert other["tau"] == pytest.approx(ours["tau"], rel=0.1) and other["speedup"] > 0
    # each peer beside this project's loop on the same work: tokens per second, paired trial by trial
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    rate = {(t["arm"], t["prompt_index"]): t["tokens_per_sec"] for t in trials}
    paired = sorted(rate[("zlab fixed", i)] / rate[("dflash zlab", i)] for i in (0, 1))
    assert theirs["vs_project_arm"] == "zlab fixed" and theirs["vs_project"] == pytest.approx(sum(paired) / 2)
    assert f"zlab fixed: {theirs['vs_project']:.2f}x this one's tok/s" in table


@pytest.mark.skipif(os.environ.get("DSPARK_SKIP_PEERS") is not None, reason="DSPARK_SKIP_PEERS is set")
def test_mlx_vlm_s_loop_runs_each_drafter_it_reads_in_the_same_run(dirs, kinds, tmp_path, capsys):
    """--peer mlx-vlm: mlx-vlm 0.7.10's own loop (``generate_step`` with its drafter) on each
    drafter it runs, greedy, its output plain decoding's, with its rounds; this project's own format
    and a drafter mlx-vlm fails on (its DSpark port lacks K = V attention: the DeepSpec head) are
    one sentence each and no arm."""
    assert PEERS.exists(), "the peer environment is missing: run `make peers` (make test does)"
    deepspec = ckpt.write_deepspec(tmp_path / "deepspec", ckpt.target_model())
    out = tmp_path / "out"
    drafters = [*(str(kinds[k]) for k in ("assistant", "eagle3", "dflash2")), str(dirs["native"]), str(deepspec)]
    assert (
        main(
            [
                "bench",
                "--target",
                str(dirs["target"]),
                *(a for d in drafters for a in ("--drafter", d)),
                "--prompts",
                str(dirs["prompts"]),
                "--max-tokens",
                "40",
                "--repeats",
                "1",
                "--policy",
                "fixed",
                "--peer",
                "mlx-vlm",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "mlx-vlm does not read native (this project's own dspark-drafter format): no mlx-vlm arm" in err
    said = [line for line in err.splitlines() if "mlx-vlm cannot run deepspec (deepspec format)" in line]
    assert len(said) == 1 and "no mlx-vlm arm for it" in said[0], err
    doc = json.loads((out / "summary.json").read_text())
    arms = {a["arm"]: a for a in doc["arms"]}
    assert "mlx-vlm native" not in arms and "mlx-vlm deepspec" not in arms
    trials = report.read_trials(out)
    for name, kind in (("assistant", "gemma4-assistant"), ("eagle3", "eagle3"), ("dflash2", "dflash2")):
        theirs, ours = arms[f"mlx-vlm {name}"], arms[f"{name} fixed"]
        assert theirs["kind"] == kind and theirs["compared"] == 2 and theirs["speedup"] > 0 and theirs["rounds"] > 0
        assert ours["identical"] == ours["compared"] == 2
        # mlx-vlm's EAGLE-3 loop leaves plain greedy output on this head once its rollback has cut a
        # sliding window (test_eagle3.py): judged, not equal
        if name != "eagle3":
            assert theirs["identical"] == 2, theirs
            # the same drafter drafting from one position later (mlx-vlm takes the first token from
            # the prompt pass), so the rounds are shifted, not the same
            assert theirs["tau"] == pytest.approx(ours["tau"], rel=0.15), (name, theirs["tau"], ours["tau"])
        for t in (t for t in trials if t["arm"] == f"mlx-vlm {name}"):
            # 4 drafts every round (the assistant's num_assistant_tokens, the EAGLE-3 head's block,
            # DFlash 2's runtime block of 5 slots), the last as far as the output had room
            assert t["widths"][:-1] == [4] * (len(t["widths"]) - 1) and 1 <= t["widths"][-1] <= 4
            assert sum(t["accepted"]) + t["rounds"] == 39  # the first token comes from the prompt pass


def test_bench_by_context_length_runs_every_arm_on_prompts_of_each_length(dirs, tmp_path, capsys):
    """--context 16,200: every arm on each prompt padded to 16 and to 200 tokens, reported per
    length (dspark.bench.contexts), every output still plain decoding's."""
    from dspark import load_target
    from dspark.bench import contexts

    out = tmp_path / "out"
    assert bench(dirs, out, "--policy", "auto", "--context", "200,16", "--repeats", "1") == 0
    assert "native auto @200" in capsys.readouterr().out
    trials = report.read_trials(out)
    assert sorted({t["context"] for t in trials}) == [16, 200] and len(trials) == 2 * 2 * 3  # lengths x prompts x arms
    doc = json.loads((out / "summary.json").read_text())
    assert doc["settings"]["contexts"] == [16, 200]
    arms = {(a.get("context"), a["arm"]): a for a in doc["arms"]}
    assert set(arms) == {(c, n) for c in (16, 200) for n in ("plain", "native auto", "zlab auto")}
    assert all(a["identical"] == a["compared"] == 2 for (c, n), a in arms.items() if n != "plain")
    # the prompts: exactly that long, each ending with its own prompt, each padded differently
    target = load_target(dirs["target"])
    ids = [target.encode(t) for t in json.loads(dirs["prompts"].read_text())]
    long = contexts.padded(target, ids, 200)
    assert [len(x) for x in long] == [200, 200] and all(x[-len(i) :] == i for x, i in zip(long, ids))
    assert long[0][:100] != long[1][:100]
    assert contexts.padded(target, ids, 3) == [i[-3:] for i in ids]
    with pytest.raises(Exception, match="comma-separated"):
        contexts.parse("64;1024")
