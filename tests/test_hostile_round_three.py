"""The third audit's cases (issue #43) on export, bench and training: nothing the user made is
lost (a trained drafter under ``train --resume``, results under ``bench --out``, an export under
a killed ``--force``, a run's checkpoint on SIGHUP), every shell command written for a user to
paste is quoted for the shell, every name shown is escaped for the terminal, nonsense options
are one sentence before anything is measured, and what used to be an internal error (a path
past PATH_MAX, a folder in place of a results file, a full disk) is one sentence, exit 2.

The table: (name, the command line built from the fixture's folders, expected exit status, a
fragment of the message, the files that must be byte for byte what they were)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hostile_fixtures import TRAIN, copy, fifo, good_pair, link_to_dev_zero, target_variant
from hostile_round_two import ESCAPES

from dspark.bench import report, trials
from dspark.cli import main

ROOT = Path(__file__).resolve().parent.parent
#: A path no system takes: longer than PATH_MAX (4096 on Linux, 1024 on macOS) and with a name
#: past NAME_MAX (255).
TOO_LONG = "/".join(["x" * 250] * 20)

#: A drafter ``dspark init`` makes in a second, for any format.
SMALL = ["--block-size", "4", "--layers", "1", "--taps", "1,3", "--no-markov", "--no-confidence"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    out = good_pair(tmp_path_factory.mktemp("round_three"), "--no-confidence")
    root, d = out["root"], out["drafter"]
    out["prompts"] = root / "prompts.json"
    out["prompts"].write_text(json.dumps(["def add(a, b):", "x = 1"]))
    # a drafter export writes as it is: z-lab's format, without the heads z-lab has not
    assert main(["init", "--target", str(out["target"]), "--out", str(root / "zlab"), *SMALL, "--format", "zlab"]) == 0
    out["zlab"] = root / "zlab"
    rng = np.random.default_rng(0)
    words = "def class return self if else for in while import from as with print value name".split()
    for name in ("data.txt", "other.txt"):
        (root / name).write_text("\n".join(" ".join(rng.choice(words, size=12)) for _ in range(40)))
    # a trained drafter (any drafter folder stands for one) without, and with a broken, .train/
    for name in ("copied_without_dotfiles", "state_fifo", "state_dev_zero"):
        copy(d, root / name)
    (root / "state_fifo" / ".train").mkdir()
    fifo(root / "state_fifo" / ".train" / "train_state.safetensors")
    (root / "state_dev_zero" / ".train").mkdir()
    link_to_dev_zero(root / "state_dev_zero" / ".train" / "train_state.safetensors")
    # the user's results without a trials.jsonl, and results whose names are folders
    (root / "my_results").mkdir()
    (root / "my_results" / "summary.json").write_text('{"mine": true}')
    (root / "my_results" / "trials.csv").write_text("arm,mine\n")
    for name in ("summary.json", "trials.jsonl"):
        (root / f"{name}_folder" / name).mkdir(parents=True)
        (root / f"{name}_folder" / name / "keep.txt").write_text("mine")
    out["short"] = target_variant(
        out["target"], root, "short_positions", lambda c: c.__setitem__("max_position_embeddings", 64)
    )
    assert main(["init", "--target", str(out["short"]), "--out", str(root / "short_drafter"), *SMALL]) == 0
    out["short_drafter"] = root / "short_drafter"
    return out


def _train(d, out, *extra) -> list[str]:
    return [
        "train",
        "--target",
        str(d["target"]),
        "--data",
        str(d["root"] / "data.txt"),
        "--out",
        str(out),
        *TRAIN,
        *extra,
    ]


def _bench(d, out, *extra, target=None, drafters=None) -> list[str]:
    return [
        "bench",
        "--target",
        str(target or d["target"]),
        *[x for p in (drafters or [d["drafter"]]) for x in ("--drafter", str(p))],
        "--prompts",
        str(d["prompts"]),
        "--max-tokens",
        "8",
        "--repeats",
        "1",
        *(["--policy", "fixed"] if "--policy" not in extra else []),
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def _export(d, out, *extra) -> list[str]:
    return ["export", str(d["zlab"]), "--format", "zlab", "--out", str(out), *extra]


def cases(d) -> list[tuple[str, list[str], int, str, list[Path]]]:
    r = d["root"]
    weights = lambda name: [r / name / "model.safetensors", r / name / "config.json"]
    mine = [r / "my_results" / "summary.json", r / "my_results" / "trials.csv"]
    return [
        # lost work: a trained drafter under --resume
        (
            "train --resume into a drafter copied without its .train/",
            _train(d, r / "copied_without_dotfiles", "--resume", "--steps", "2"),
            2,
            "but no training state to continue",
            weights("copied_without_dotfiles"),
        ),
        (
            "train --resume with a FIFO as its training state",
            _train(d, r / "state_fifo", "--resume", "--steps", "2"),
            2,
            "is not a training checkpoint but a FIFO",
            weights("state_fifo"),
        ),
        (
            "train --resume with /dev/zero as its training state",
            _train(d, r / "state_dev_zero", "--resume", "--steps", "2"),
            2,
            "is not a training checkpoint but a character device",
            weights("state_dev_zero"),
        ),
        # lost work: the user's results under bench --out
        (
            "bench --out holding summary.json and trials.csv but no trials.jsonl",
            _bench(d, r / "my_results"),
            2,
            "already holds benchmark results (use --force to replace them: trials.csv, summary.json;",
            mine,
        ),
        (
            "bench --force where summary.json is a folder",
            _bench(d, r / "summary.json_folder", "--force"),
            2,
            "summary.json is a directory, not a file dspark bench wrote",
            [r / "summary.json_folder" / "summary.json" / "keep.txt"],
        ),
        (
            "bench --force where trials.jsonl is a folder",
            _bench(d, r / "trials.jsonl_folder", "--force"),
            2,
            "trials.jsonl is a directory, not a file dspark bench wrote",
            [r / "trials.jsonl_folder" / "trials.jsonl" / "keep.txt"],
        ),
        # arms that would collide
        (
            "bench --policy fixed twice",
            _bench(d, r / "b1", "--policy", "fixed", "--policy", "fixed"),
            2,
            "given twice",
            [],
        ),
        (
            "bench with one drafter folder given twice",
            _bench(d, r / "b2", drafters=[d["drafter"], Path(str(d["drafter"]) + "/")]),
            2,
            "is given twice (the same folder as",
            [],
        ),
        # figures from nonsense
        (
            "bench --mlx-lm-num-draft 10^9",
            _bench(d, r / "b3", "--mlx-lm-num-draft", str(10**9)),
            2,
            "between 1 and 64",
            [],
        ),
        (
            "bench --mlx-lm-num-draft making every token in mlx-lm's first round",
            _bench(d, r / "b4", "--mlx-lm-draft", str(d["target"]), "--mlx-lm-num-draft", "7"),
            2,
            "could make all 8 tokens in mlx-lm's first round",
            [],
        ),
        (
            "bench --context past the target's positions",
            _bench(d, r / "b5", "--context", "60", target=d["short"], drafters=[d["short_drafter"]]),
            2,
            "--context 60 and --max-tokens 8 make 68 positions, more than the 64 this target holds",
            [],
        ),
        (
            "bench --context of a million on a 64-position target",
            _bench(d, r / "b6", "--context", "1000000", target=d["short"], drafters=[d["short_drafter"]]),
            2,
            "more than the 64 this target holds",
            [],
        ),
        # internal errors before
        ("export --out .", _export(d, "."), 2, "names no folder of its own", []),
        ("export --out ''", _export(d, ""), 2, "--out is empty", []),
        ("export --out past PATH_MAX", _export(d, r / TOO_LONG), 2, "the path is too long for this system", []),
        ("bench --out past PATH_MAX", _bench(d, r / TOO_LONG), 2, "the path is too long for this system", []),
        (
            "train --out past PATH_MAX",
            _train(d, r / TOO_LONG, "--steps", "2"),
            2,
            "the path is too long for this system",
            [],
        ),
        # the review's cases: the others that write a folder, past PATH_MAX and one name past NAME_MAX
        (
            "make-demo --out past PATH_MAX",
            ["make-demo", "--only", "target", "--out", str(r / TOO_LONG)],
            2,
            "the path is too long for this system",
            [],
        ),
        (
            "quantize --out a name past NAME_MAX",
            ["quantize", str(d["drafter"]), "--bits", "4", "--out", str(r / ("y" * 300))],
            2,
            "the path is too long for this system",
            [],
        ),
        # what the README and the terminal get
        (
            "export --verifier with a line break",
            _export(d, r / "e1", "--verifier", "a\n$(touch x)"),
            2,
            "control character",
            [],
        ),
        (
            "export --verifier of terminal escapes",
            _export(d, r / "e2", "--verifier", ESCAPES),
            2,
            "control character",
            [],
        ),
        ("export --out with a line break", _export(d, r / "e3\nx"), 2, "holds a control character", []),
    ]


def test_the_table_of_round_three(dirs, capsys):
    table = cases(dirs)
    for name, argv, status, fragment, kept in table:
        before = {p: p.read_bytes() for p in kept}
        capsys.readouterr()
        start = time.perf_counter()
        got = main(argv)
        err = capsys.readouterr().err.strip()
        assert got == status, (name, got, err)
        assert time.perf_counter() - start < 60, name
        lines = err.splitlines()
        assert len(lines) == 1 and fragment in err.replace(str(dirs["root"]), "") and "Traceback" not in err, (
            name,
            err,
        )
        assert not [c for c in err if unicodedata.category(c) in ("Cc", "Cf")], (name, err)
        assert {p: p.read_bytes() for p in kept} == before, name
    # nothing of a refused run was left behind
    assert not (dirs["root"] / "e1").exists() and not list(dirs["root"].glob(".e*"))


def test_a_bench_refused_for_its_inputs_leaves_no_empty_folder(dirs, tmp_path, capsys):
    """The review's case: a --prompts file of no texts (and a --context past the target) was
    refused after --out was made, and left it empty; a folder that was there stays."""
    bad = tmp_path / "nonstr.json"
    bad.write_text('[null, {"a": 2}]')
    argv = _bench(dirs, tmp_path / "new_out")
    argv[argv.index("--prompts") + 1] = str(bad)
    assert main(argv) == 2 and "prompt 0 is null, not a text" in capsys.readouterr().err
    assert not (tmp_path / "new_out").exists()
    (tmp_path / "kept").mkdir()
    argv[argv.index("--out") + 1] = str(tmp_path / "kept")
    assert main(argv) == 2 and (tmp_path / "kept").is_dir()


# ----------------------------------------------------------------------------- lost work
def test_bench_context_past_the_positions_measures_no_costs(dirs, monkeypatch, capsys):
    """The audit's case ran into the costs measurement (seconds to minutes) before any sentence."""
    from dspark import costs

    monkeypatch.setattr(costs, "measure", lambda *a, **k: pytest.fail("costs measured before the refusal"))
    argv = _bench(dirs, dirs["root"] / "b7", "--context", "60", target=dirs["short"], drafters=[dirs["short_drafter"]])
    assert main(argv) == 2
    assert "more than the 64 this target holds" in capsys.readouterr().err


@pytest.mark.usefixtures("costs_measured_once")
def test_a_second_bench_into_the_same_folder_is_refused_while_the_first_runs(dirs, tmp_path, capsys):
    """The audit's case: two benches into one new --out both appended to one trials.jsonl and the
    last wrote the summary. The folder is the first one's while it runs (a child holds it here,
    as a running bench does); the second is one sentence and writes nothing; after the first
    ends, the folder takes a bench again and no lock is left."""
    out = tmp_path / "results"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom dspark.bench.trials import only_writer\n"
            "with only_writer(Path(sys.argv[1])):\n    print('holding', flush=True)\n    time.sleep(600)\n",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        capsys.readouterr()
        assert main(_bench(dirs, out)) == 2
        err = capsys.readouterr().err.strip()
        assert f"another dspark bench (process {holder.pid}) is writing to" in err and len(err.splitlines()) == 1
        assert sorted(p.name for p in out.iterdir()) == [trials.LOCK_FILE]
    finally:
        holder.kill()
        holder.wait()
    assert main(_bench(dirs, out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "trials.csv", "trials.jsonl"]


@pytest.mark.usefixtures("costs_measured_once")
def test_two_drafter_folders_of_one_name_are_two_arms(dirs, tmp_path, capsys):
    """The audit's case: arms were keyed by the folder's name, so a/drafter's trials overwrote
    b/drafter's and the summary counted one of them twice. Each is now its own arm, named by as
    many folders as tell them apart."""
    a, b = copy(dirs["drafter"], tmp_path / "a" / "drafter"), copy(dirs["drafter"], tmp_path / "b" / "drafter")
    out = tmp_path / "it's my results"
    argv = _bench(dirs, out, drafters=[a, b])
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert shlex.split(summary["command"]) == ["dspark", *argv]  # the command kept is one a shell runs again
    arms = {s["arm"]: s for s in summary["arms"]}
    assert set(arms) == {"plain", "a/drafter fixed", "b/drafter fixed"}
    assert arms["a/drafter fixed"]["trials"] == arms["b/drafter fixed"]["trials"] == 2  # 2 prompts x 1 repeat
    assert set(summary["costs"]) == {"a/drafter", "b/drafter"}
    assert trials.arm_names(["x/d", "y/d", "z/e"]) == ["x/d", "y/d", "e"]


@pytest.mark.usefixtures("costs_measured_once")
def test_a_full_disk_before_the_first_trial_is_one_sentence(dirs, tmp_path, capsys, monkeypatch):
    """The audit's case: bench --out on a full disk was an internal error (the CSV header's write,
    before any trial, was not guarded). Now one sentence, and nothing half-written is left."""

    def full(path, text):
        path.open("a").close()  # opened, as on a full disk, and nothing goes in
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report.TrialLog, "_append", staticmethod(full))
    out = tmp_path / "results"
    capsys.readouterr()
    assert main(_bench(dirs, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dspark: error: could not write") and "Traceback" not in "\n".join(err), err
    assert "the disk is full" in err[-1] and "nothing was measured" in err[-1], err
    assert not out.exists()  # nothing half-written, and no empty folder of this run's making


def test_train_resume_on_other_data_is_refused(dirs, tmp_path, capsys):
    """The audit's case: ``--resume`` with another ``--data`` went on silently on the first
    run's data. The same data (or none given again) continues; other data is one sentence."""
    out = tmp_path / "run"
    assert main(_train(dirs, out, "--steps", "3")) == 0
    capsys.readouterr()
    other = [a if a != str(dirs["root"] / "data.txt") else str(dirs["root"] / "other.txt") for a in _train(dirs, out)]
    assert main([*other, "--resume", "--steps", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "was trained on other texts than --data names now" in err and len(err.splitlines()) == 1, err
    assert main([*_train(dirs, out), "--resume", "--steps", "4"]) == 0
    assert "resumed at step 3" in capsys.readouterr().err
    # a run saved before the texts were recorded: said, not refused
    import mlx.core as mx

    data = out / ".train" / "train_data.safetensors"
    arrays, meta = mx.load(str(data), return_metadata=True)
    mx.save_safetensors(str(data), arrays, {k: v for k, v in meta.items() if k != "texts"})
    assert main([*other, "--resume", "--steps", "5"]) == 0
    assert "--data is not read again" in capsys.readouterr().err


def test_train_resume_into_an_empty_folder_still_starts(dirs, tmp_path, capsys):
    """What --resume did and still does where nothing would be lost: a new run, said."""
    assert main(_train(dirs, tmp_path / "new", "--resume", "--steps", "2")) == 0
    assert "nothing to resume" in capsys.readouterr().err
    assert (tmp_path / "new" / "model.safetensors").is_file()


def test_sighup_saves_a_checkpoint_as_sigterm_does(dirs, tmp_path):
    """The audit's case: a terminal or ssh session closing killed training with no checkpoint."""
    out = tmp_path / "run"
    # a test runner started under nohup would hand the child an ignored SIGHUP: the child takes
    # SIGHUP's default back before dspark starts (in the child itself: no preexec_fn, which is
    # unsafe in a threaded parent on macOS)
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
        "sys.argv[0] = 'dspark'; runpy.run_module('dspark.cli', run_name='__main__')"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", start, *_train(dirs, out, "--steps", "400", "--checkpoint-minutes", "0")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not (out / ".train" / "train_state.safetensors").exists() and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGHUP)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "checkpoint saved at step" in err and err.strip().splitlines()[-1] == "dspark: interrupted", err[-2000:]


# ----------------------------------------------------------------------------- export --force
def _export_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_export_force_killed_between_its_renames_is_put_right(dirs, tmp_path, capsys):
    """The audit's case: killed between moving the old export aside and renaming the new one in,
    --force left the named folder missing, both exports hidden, and a staging copy that no later
    export removed. The next export puts the old one back (and says where it was), removes every
    hidden copy of the dead run, and replaces it."""
    out = tmp_path / "served"
    assert main(_export(dirs, out)) == 0
    pid = _dead_pid()
    old, new, staging = (
        tmp_path / f".served.replaced-{pid}",
        tmp_path / f".served.export-{pid}",
        tmp_path / f"..served.export-{pid}.{pid}.tmp",
    )
    shutil.copytree(out, new)
    shutil.copytree(out, staging)
    os.rename(out, old)
    (old / "mine.txt").write_text("the old export")
    capsys.readouterr()
    assert main(_export(dirs, out, "--force")) == 0
    err = capsys.readouterr().err
    assert f"had left it in {old}; put back" in err, err
    assert _export_files(out) == ["README.md", "config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_force_where_folders_cannot_be_swapped_in_one_step(dirs, tmp_path, monkeypatch, capsys):
    """Where the system has no exchange of two names, the two renames: the new export in place,
    nothing hidden left; a killed run's leftovers beside a whole --out are removed."""
    from dspark import export

    out = tmp_path / "served"
    assert main(_export(dirs, out)) == 0
    (out / "mine.txt").write_text("replaced by --force")
    leftover = tmp_path / f".served.export-{_dead_pid()}"  # the old export, after a swap killed before its removal
    shutil.copytree(out, leftover)
    monkeypatch.setattr(export, "exchange", lambda a, b: False)
    assert main(_export(dirs, out, "--force")) == 0
    assert _export_files(out) == ["README.md", "config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_force_swaps_in_one_step_where_the_system_can(dirs, tmp_path, monkeypatch):
    from dspark import export, files

    swapped = []
    real = files.exchange
    monkeypatch.setattr(export, "exchange", lambda a, b: swapped.append(real(a, b)) or swapped[-1])
    out = tmp_path / "served"
    assert main(_export(dirs, out)) == 0
    (out / "mine.txt").write_text("replaced by --force")
    assert main(_export(dirs, out, "--force")) == 0
    assert _export_files(out) == ["README.md", "config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "was_in_a").write_text("")
    if real(tmp_path / "a", tmp_path / "b"):  # this file system swaps two names in one step: export did
        assert [p.name for p in (tmp_path / "b").iterdir()] == ["was_in_a"] and swapped == [True]


# ----------------------------------------------------------------------------- pasted and shown text
def _fake(bin_dir: Path, name: str) -> None:
    """A stand-in for ``name`` that prints each argument it was given on a line of its own."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text('#!/bin/sh\nprintf "%s\\n" "$0"\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (bin_dir / name).chmod(0o755)


def _blocks(readme: str) -> list[str]:
    parts = readme.split("```bash\n")[1:]
    return [p.split("\n```")[0] for p in parts]


def test_the_serve_commands_are_quoted_for_the_shell(dirs, tmp_path, capsys):
    """The audit's case: a --verifier holding ``$(...)`` ran when the README's block was pasted; an
    --out with spaces became three arguments, one with a quote broke the command. Each block of
    the README, and what the command prints, run in a POSIX shell as a user pastes them, give
    the programs exactly the verifier and the folder, and run nothing else."""
    marker = tmp_path / "ran"
    verifier = f"org/model $(touch {marker}) `touch {marker}` 'q\" ; touch {marker}"
    out = tmp_path / "my exports" / "it's here $HOME"
    capsys.readouterr()
    assert main(_export(dirs, out, "--verifier", verifier)) == 0
    printed = capsys.readouterr().out
    bin_dir = tmp_path / "bin"
    for name in ("vllm", "python"):
        _fake(bin_dir, name)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    blocks = _blocks((out / "README.md").read_text())
    assert len(blocks) == 2  # vLLM's and SGLang's
    shown = printed.split("serve it with vLLM:\n")[1].split("\nSGLang: ")
    for command in [*blocks, *shown]:
        r = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (command, r.stderr)
        args = r.stdout.splitlines()[1:]
        if args[0] == "serve":
            assert args[1] == verifier and json.loads(args[3])["model"] == str(out), args
        else:
            assert args[args.index("--model-path") + 1] == verifier, args
            assert args[args.index("--speculative-draft-model-path") + 1] == str(out), args
    assert not marker.exists()


@pytest.mark.usefixtures("costs_measured_once")
def test_names_shown_on_the_terminal_are_escaped(dirs, tmp_path, capsys):
    """The audit's case: a drafter's path, or a profile's source and target_id, holding terminal
    escapes reached the terminal through export's, inspect's, diagnose's and bench's output."""
    d = copy(dirs["drafter"], tmp_path / ESCAPES.replace("/", "_"))
    profile = {
        "version": 1,
        "per_position_acceptance": [0.5, 0.3, 0.2, 0.1],
        "block_size": 4,
        "target_id": ESCAPES,
        "target_fingerprint": None,
        "templated": None,
        "thinking": None,
        "context_length": None,
        "source": ESCAPES,
    }
    (d / "dspark-profile.json").write_text(json.dumps(profile))
    zlab = copy(dirs["zlab"], tmp_path / ("zlab" + ESCAPES.replace("/", "_")))
    for argv in (
        ["inspect", str(d)],
        [
            "diagnose",
            "--target",
            str(dirs["target"]),
            "--drafter",
            str(d),
            "--prompts",
            str(dirs["prompts"]),
            "--limit",
            "1",
            "--max-tokens",
            "8",
        ],
        ["export", str(zlab), "--format", "zlab", "--out", str(tmp_path / "served")],
        _bench(dirs, tmp_path / "results", drafters=[d]),
    ):
        capsys.readouterr()
        assert main(argv) == 0, argv
        said = capsys.readouterr()
        for text in (said.out, said.err):
            assert not [c for c in text if unicodedata.category(c) in ("Cc", "Cf") and c != "\n"], (argv, text)
        assert "\\x1b" in said.out, (argv, said.out)
    readme = (tmp_path / "served" / "README.md").read_text()
    assert "\x1b" not in readme and "\\x1b" in readme
