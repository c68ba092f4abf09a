"""Bad inputs and faults, as a hostile user or a stranger's checkpoint would bring them: each is
one line on stderr, with every control character escaped, and exit status 2 (0 where the input is
legal), within seconds; nothing from a model directory runs. Training faults:
``test_hostile_training.py``; lost results (bench, quantize, a full disk):
``test_hostile_outputs.py``; the app headless: ``test_hostile_app.py``.

The table: (name, the command line built from the fixture's directories, expected exit
status, a fragment of the message). Its second part is issue #26's audit (crafted safetensors
and JSON, special files, chat templates and tokenizers, prompts), the variants built by
``hostile_round_two.py``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import hostile_round_two
import mlx.core as mx
import pytest
from hostile_fixtures import cfg as _cfg
from hostile_fixtures import copy, drafter_variant, edit_json, good_pair, target_variant

from dspark.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    out = good_pair(tmp_path_factory.mktemp("hostile"))
    root, t, d = out["root"], out["target"], out["drafter"]
    V = drafter_variant
    out.update(
        {
            "mask_huge": V(d, root, "mask_huge", _cfg("mask_token_id", 10**6)),
            "mask_vocab": V(d, root, "mask_vocab", _cfg("mask_token_id", 300)),
            "block_huge": V(d, root, "block_huge", _cfg("block_size", 10**6)),
            "block_zero": V(d, root, "block_zero", _cfg("block_size", 0)),
            "block_negative": V(d, root, "block_negative", _cfg("block_size", -3)),
            "layers_huge": V(d, root, "layers_huge", _cfg("num_layers", 10**6)),
            "tap_negative": V(d, root, "tap_negative", _cfg("tap_layers", [-1, 3])),
            "tap_beyond": V(d, root, "tap_beyond", _cfg("tap_layers", [1, 30])),
            "no_target_id": V(d, root, "no_target_id", lambda c: c.pop("target_id")),
            "version": V(d, root, "version", lambda c: c.__setitem__("version", 99)),
            "unknown_key": V(d, root, "unknown_key", _cfg("flux_capacitor", 1)),
            "dims_string": V(d, root, "dims_string", lambda c: c["dims"].__setitem__("hidden_size", "64")),
            "int_weights": V(
                d,
                root,
                "int_weights",
                weights=lambda w: w.__setitem__("norm.weight", w["norm.weight"].astype(mx.int32)),
            ),
            "shape": V(d, root, "shape", weights=lambda w: w.__setitem__("norm.weight", mx.ones((7,)))),
            "missing": V(d, root, "missing", weights=lambda w: w.pop("norm.weight")),
        }
    )
    bad_json = copy(d, root / "bad_json")
    (bad_json / "config.json").write_text("{oops")
    truncated = copy(d, root / "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 3])
    huge_header = copy(d, root / "huge_header")
    (huge_header / "model.safetensors").write_bytes((10**15).to_bytes(8, "little") + b"{}")
    no_config_dir = copy(d, root / "config_is_dir")
    (no_config_dir / "config.json").unlink()
    (no_config_dir / "config.json").mkdir()
    out.update(bad_json=bad_json, truncated=truncated, huge_header=huge_header, config_is_dir=no_config_dir)
    T = target_variant
    out.update(
        {
            "no_model_type": T(t, root, "no_model_type", lambda c: c.pop("model_type")),
            "hidden_string": T(t, root, "hidden_string", lambda c: c.__setitem__("hidden_size", "abc")),
            "vocab_huge": T(t, root, "vocab_huge", lambda c: c.__setitem__("vocab_size", 10**9)),
            "model_type_path": T(t, root, "model_type_path", lambda c: c.__setitem__("model_type", "../../os")),
            "auto_map": T(t, root, "auto_map", lambda c: c.__setitem__("auto_map", {"AutoModel": "m.M"})),
            "layers_disagree": T(
                t,
                root,
                "layers_disagree",
                lambda c: c.__setitem__(
                    "layer_types",
                    (c.get("layer_types") or ["full_attention"] * c["num_hidden_layers"]) + ["full_attention"],
                ),
            ),
        }
    )
    tok_code = copy(t, root / "tokenizer_code")
    edit_json(
        tok_code / "tokenizer_config.json",
        lambda c: c.update(auto_map={"AutoTokenizer": ["tokenization_evil.Evil", None]}, tokenizer_class="Evil"),
    )
    marker = root / "code_ran"
    (tok_code / "tokenization_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    py_target = copy(t, root / "py_target")
    (py_target / "modeling_gemma4.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    garbage = copy(t, root / "garbage_config")
    (garbage / "config.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    out.update(tokenizer_code=tok_code, py_target=py_target, garbage_config=garbage, marker=marker)
    (root / "latin1.txt").write_bytes(b"caf\xe9 = 1\n")
    (root / "a_file").write_text("not a directory")
    (root / "prompt_dir").mkdir()
    (root / "long_prompt.txt").write_text("x = 1 " * 170_000)  # 1 MB, some 500k tokens
    out.update(hostile_round_two.build(root, t, d))
    return out


def cases(d) -> list[tuple[str, list[str], int, str]]:
    t, r = str(d["target"]), d["root"]
    gen = ["generate", "--target", t, "--prompt", "x = 1", "--max-tokens", "4"]

    def with_drafter(name):
        return [*gen, "--drafter", str(d[name])]

    return [
        # crafted drafter configs
        (
            "mask token far outside the vocabulary",
            with_drafter("mask_huge"),
            2,
            "mask token id 1000000 is outside the vocabulary",
        ),
        ("mask token equal to the vocabulary size", with_drafter("mask_vocab"), 2, "mask token id 300 is outside"),
        ("block size a million", with_drafter("block_huge"), 2, "block-size must be between 1 and 64"),
        ("block size zero", with_drafter("block_zero"), 2, "block-size must be between 1 and 64"),
        ("block size negative", with_drafter("block_negative"), 2, "block-size must be between 1 and 64"),
        ("a million drafter layers", with_drafter("layers_huge"), 2, "layers must be between 1 and 64"),
        ("tap layer -1", with_drafter("tap_negative"), 2, "tap layers [-1, 3] must be distinct indices"),
        ("tap layer beyond the target", with_drafter("tap_beyond"), 2, "tap layers [1, 30] must be distinct indices"),
        ("no target_id", with_drafter("no_target_id"), 2, "has no target_id"),
        ("another format version", with_drafter("version"), 2, "format version 99"),
        ("an unknown config key", with_drafter("unknown_key"), 2, "unknown drafter config keys"),
        ("hidden size as a string", with_drafter("dims_string"), 2, "hidden_size is '64', expected an integer"),
        ("integer weights", with_drafter("int_weights"), 2, "norm.weight is stored as I32"),
        ("a weight of the wrong shape", with_drafter("shape"), 2, "norm.weight has shape [7]"),
        ("a weight missing", with_drafter("missing"), 2, "does not match its config.json"),
        ("config.json not JSON", with_drafter("bad_json"), 2, "is not valid JSON"),
        ("safetensors truncated", with_drafter("truncated"), 2, "not a readable safetensors file"),
        ("safetensors header of a petabyte", with_drafter("huge_header"), 2, "not a readable safetensors file"),
        ("config.json is a folder", with_drafter("config_is_dir"), 2, "has no config.json"),
        ("drafter directory missing", [*gen, "--drafter", str(r / "nope")], 2, "drafter directory not found"),
        ("a target given as drafter", [*gen, "--drafter", t], 2, "holds a model"),
        # generation options
        ("temperature nan", [*gen, "--temperature", "nan"], 2, "temperature must be a finite number"),
        ("temperature negative", [*gen, "--temperature", "-1"], 2, "temperature must be between 0"),
        ("top-k beyond the vocabulary", [*gen, "--top-k", "100000"], 2, "larger than the target's vocabulary (300)"),
        ("seed -1", [*gen, "--seed", "-1"], 2, "seed must be between 0"),
        ("zero tokens", [*gen, "--max-tokens", "0"], 2, "max-tokens must be between 1"),
        (
            "block size a million on the command line",
            [*gen, "--block-size", "1000000"],
            2,
            "block-size must be between 0 and 64",
        ),
        ("top-p 2", [*gen, "--top-p", "2"], 2, "top-p must be between 0 and 1"),
        ("top-k not a number", [*gen, "--top-k", "lots"], 2, "invalid int value: 'lots'"),
        ("chat template options not JSON", [*gen, "--chat-template-config", "{bad"], 2, "not valid JSON"),
        (
            "prompt file not UTF-8",
            ["generate", "--target", t, "--prompt-file", str(r / "latin1.txt")],
            2,
            "is not UTF-8 text",
        ),
        (
            "prompt file is a folder",
            ["generate", "--target", t, "--prompt-file", str(r / "prompt_dir")],
            2,
            "prompt file not found",
        ),
        ("empty prompt", ["generate", "--target", t, "--prompt", "  \n "], 2, "the prompt is empty"),
        ("a legal run", [*gen, "--temperature", "0.7", "--top-k", "5"], 0, ""),
        # target directories
        (
            "target without model_type",
            ["generate", "--target", str(d["no_model_type"]), "--prompt", "x"],
            2,
            "no valid model_type",
        ),
        (
            "hidden size a string in the target",
            ["generate", "--target", str(d["hidden_string"]), "--prompt", "x"],
            2,
            "hidden_size is 'abc', expected an integer",
        ),
        (
            "a vocabulary of a billion",
            ["generate", "--target", str(d["vocab_huge"]), "--prompt", "x"],
            2,
            "vocab_size is 1000000000",
        ),
        (
            "model_type naming a path",
            ["generate", "--target", str(d["model_type_path"]), "--prompt", "x"],
            2,
            "no valid model_type",
        ),
        (
            "a drafter given as target",
            ["generate", "--target", str(d["drafter"]), "--prompt", "x"],
            2,
            "is a drafter, not a target",
        ),
        (
            "a target that asks for custom code",
            ["generate", "--target", str(d["auto_map"]), "--prompt", "x"],
            2,
            "custom code (auto_map",
        ),
        (
            "a target with a custom tokenizer",
            ["generate", "--target", str(d["tokenizer_code"]), "--prompt", "x"],
            2,
            "asks to run Python files (tokenization_evil.py)",
        ),
        (
            "a target with Python files",
            ["generate", "--target", str(d["py_target"]), "--prompt", "x"],
            2,
            "asks to run Python files",
        ),
        (
            "a target config that is binary",
            ["generate", "--target", str(d["garbage_config"]), "--prompt", "x"],
            2,
            "is not valid JSON",
        ),
        (
            "a target directory that does not exist",
            ["generate", "--target", str(r / "no_such_target"), "--prompt", "x"],
            2,
            "target directory not found",
        ),
        # writing
        ("init into a file", ["init", "--target", t, "--out", str(r / "a_file")], 2, "is a file, not a directory"),
        (
            "init where nothing can be created",
            ["init", "--target", t, "--out", str(r / "a_file" / "sub")],
            2,
            "cannot create",
        ),
        (
            "init with a negative Markov rank",
            ["init", "--target", t, "--out", str(r / "i1"), "--markov-rank", "-1"],
            2,
            "markov-rank must be between 1",
        ),
        (
            "init with a million layers",
            ["init", "--target", t, "--out", str(r / "i2"), "--layers", "1000000"],
            2,
            "layers must be between 1 and 64",
        ),
        (
            "init with taps that are not numbers",
            ["init", "--target", t, "--out", str(r / "i3"), "--taps", "a,b"],
            2,
            "expected comma-separated integers",
        ),
        (
            "train into a file",
            ["train", "--target", t, "--data", str(r / "a_file"), "--out", str(r / "a_file")],
            2,
            "is a file, not a directory",
        ),
        (
            "train on a missing data file",
            ["train", "--target", t, "--data", str(r / "none.txt"), "--out", str(r / "t1")],
            2,
            "file not found",
        ),
        ("inspect a model directory", ["inspect", t], 2, "holds a model"),
        (
            "inspect a drafter whose block is a million",
            ["inspect", str(d["block_huge"])],
            2,
            "block-size must be between 1 and 64",
        ),
        (
            "layer_types and num_hidden_layers disagree",
            ["generate", "--target", str(d["layers_disagree"]), "--prompt", "x"],
            2,
            "layer_types for num_hidden_layers",
        ),
        (
            "costs for a block of a million",
            ["costs", "--target", t, "--drafter", str(d["drafter"]), "--block-size", "1000000"],
            2,
            "--block-size must be between 1 and 64",
        ),
        (
            "costs for a negative block",
            ["costs", "--target", t, "--drafter", str(d["drafter"]), "--block-size", "-3"],
            2,
            "--block-size must be between 1 and 64",
        ),
        (
            "calibrate on -5 rounds",
            ["calibrate", "--target", t, "--drafter", str(d["drafter"]), "--rounds", "-5"],
            2,
            "--rounds must be between 1",
        ),
        (
            "calibrate with empty prompts",
            ["calibrate", "--target", t, "--drafter", str(d["drafter"]), "--prompt-len", "0"],
            2,
            "--prompt-len must be between 1",
        ),
        (
            "make-demo with a negative time budget",
            ["make-demo", "--only", "target", "--target-minutes", "-1", "--out", str(r / "md")],
            2,
            "--target-minutes must be at least 0.01",
        ),
        (
            "make-demo with 0 drafter steps",
            ["make-demo", "--only", "drafters", "--drafter-steps", "0", "--out", str(r / "md")],
            2,
            "steps must be",
        ),
        (
            "quantize to 3 bits",
            ["quantize", str(d["drafter"]), "--bits", "3", "--out", str(r / "q3")],
            2,
            "invalid choice",
        ),
        *round_two(d),
    ]


def round_two(d) -> list[tuple[str, list[str], int, str]]:
    """Issue #26: each example of the audit, then variants of the same families."""
    t, r = str(d["target"]), d["root"]

    def target(name, *extra):
        return ["generate", "--target", str(d[name]), "--prompt", "x = 1", "--max-tokens", "4", *extra]

    def drafter(name):
        return ["generate", "--target", t, "--drafter", str(d[name]), "--prompt", "x = 1", "--max-tokens", "4"]

    bad_file = "is not a readable safetensors file"
    return [
        # the audit's examples: silent garbage
        ("an all-NaN embedding", target("t_nan_embed"), 2, "holds NaN or infinite values"),
        ("one +Inf weight", target("t_inf_weight"), 2, "holds NaN or infinite values"),
        ("a duplicate header key, the later all zeros", target("t_dup_key"), 2, "gives the key"),
        ("rope_theta 0", target("t_rope_theta_0"), 2, "rope_theta is 0, expected a number between 1"),
        ("an int8 embedding", target("t_int8_embed"), 2, "is stored as I8"),
        ("a BOOL norm", target("t_bool_norm"), 2, "is stored as BOOL"),
        ("a tensor aliased to another's bytes", target("t_alias"), 2, "shares the bytes of another tensor"),
        ("two tensors whose byte ranges overlap", target("t_overlap"), 2, "shares the bytes of another tensor"),
        ("inspect a drafter generate refuses", ["inspect", str(d["d_nan_norm"])], 2, "holds NaN or infinite values"),
        ("inspect a 16 MiB file of a trillion parameters", ["inspect", str(d["d_huge_shape"])], 2, "does not fill its"),
        # the audit's examples: internal errors, hangs, tracebacks, injection
        ("a config nested 10^5 deep", target("t_nested_config"), 2, "nested deeper than 64 levels"),
        ("a safetensors header nested 10^5 deep", target("t_nested_header"), 2, "nested deeper than 64 levels"),
        ("a 5,001-digit integer", target("t_long_int"), 2, "a number longer than 100 characters"),
        ("a complex64 norm", target("t_complex_norm"), 2, "is stored as C64"),
        ("global_head_dim 64.5", target("t_global_head_dim_frac"), 2, "global_head_dim is 64.5, expected an integer"),
        ("text_config a list", target("t_text_config_list"), 2, "text_config is [], expected a JSON object"),
        ("num_kv_shared_layers 100", target("t_kv_shared_100"), 2, "num_kv_shared_layers is 100"),
        ("calibration values that are strings", drafter("d_calibration_text"), 2, "calibration is ['a', 'b']"),
        ("a FIFO as tokenizer.json", target("t_fifo_tokenizer"), 2, "is not a regular file"),
        ("/dev/zero through a symlink", target("t_zero_tokenizer"), 2, "is not a regular file"),
        ("a chat template of 10^5 x 10^5 loops", target("t_loop_template"), 2, "ran past its 10 s budget"),
        (
            "a 1 MB prompt of some 500k tokens",
            ["generate", "--target", t, "--prompt-file", str(r / "long_prompt.txt")],
            2,
            "more than the 4,096 positions this target holds",
        ),
        (
            "a tokenizer regex that makes Rust panic",
            target("t_panic_tokenizer"),
            2,
            "could not encode this prompt (PanicException",
        ),
        ("a config value of terminal escapes", target("t_escapes"), 2, "no valid model_type"),
        # variants: weights and headers
        ("an -Inf final norm", target("t_inf_norm"), 2, "model.norm.weight holds NaN or infinite values"),
        ("an int32 layer scalar", target("t_int32_scalar"), 2, "is stored as I32"),
        ("a header shape that its bytes do not fill", target("t_huge_shape"), 2, "does not fill its"),
        ("bytes no tensor covers at the end", target("t_trailing_bytes"), 2, "truncated or damaged"),
        ("a gap between two tensors", target("t_gap"), 2, "leaves a gap before it"),
        ("a dtype safetensors does not have", target("t_unknown_dtype"), 2, "has an unknown dtype 'F128'"),
        ("byte offsets written as text", target("t_offsets_text"), 2, "has no valid data_offsets"),
        ("__metadata__ holding a number", target("t_metadata_numbers"), 2, "__metadata__ does not map names"),
        ("an empty tensor", target("t_zero_size"), 2, "is empty"),
        ("one tensor in two shards", target("t_two_shards"), 2, "is stored twice"),
        ("a drafter tensor aliased to another's bytes", drafter("d_alias"), 2, "shares the bytes of another tensor"),
        ("a drafter header of a trillion parameters", drafter("d_huge_shape"), 2, bad_file),
        ("a NaN drafter norm", drafter("d_nan_norm"), 2, "norm.weight holds NaN or infinite values"),
        # variants: config values
        ("a top-level rope_theta 0", target("t_top_rope_theta_0"), 2, "rope_theta is 0"),
        ("3 KV heads for 4 heads", target("t_kv_heads_3"), 2, "a divisor of num_attention_heads (4)"),
        ("an odd head_dim", target("t_head_dim_odd"), 2, "head_dim is 15, expected an even number"),
        ("an unknown RoPE kind", target("t_rope_type"), 2, "rope_type is 'warp'"),
        ("a rotated share of 0", target("t_rotary_0"), 2, "partial_rotary_factor is 0"),
        ("a soft-cap of 0", target("t_softcap_0"), 2, "final_logit_softcapping is 0"),
        ("an rms_norm_eps of NaN", target("t_eps_nan"), 2, "rms_norm_eps is nan, expected a finite number"),
        ("a layer type mlx-lm does not have", target("t_layer_type"), 2, "layer_types must be a list of names"),
        ("a sliding window pattern of 0", target("t_window_pattern_0"), 2, "sliding_window_pattern is 0"),
        ("an MoE block without experts", target("t_moe_no_experts"), 2, "enable_moe_block is true but num_experts"),
        ("8 of 4 experts", target("t_top_k_experts"), 2, "top_k_experts is 8, expected at most num_experts (4)"),
        ("a vocabulary of true", target("t_vocab_true"), 2, "vocab_size is True, expected an integer"),
        ("a negative pad token", target("t_pad_negative"), 2, "pad_token_id is -1"),
        ("7-bit quantization", target("t_quant_bits_7"), 2, "bits is 7, expected one of"),
        ("a config asking for model_file", target("t_model_file"), 2, "custom code (model_file in config.json)"),
        (
            "a template module named by a path",
            target("t_template_module"),
            2,
            "chat_template_type is '../../os', expected a module name",
        ),
        ("a config key given twice", target("t_dup_config_key"), 2, "gives the key 'vocab_size' twice"),
        ("a drafter config nested 10^5 deep", drafter("d_nested_config"), 2, "nested deeper than 64 levels"),
        ("a calibration temperature of 0", drafter("d_calibration_zero"), 2, "calibration is [0.0, 1.0]"),
        ("target weights as a list", drafter("d_weights_list"), 2, "target_weights is [1, 2]"),
        ("taps as a string", drafter("d_tap_string"), 2, "taps must be integers"),
        (
            "chat-template options nested 10^5 deep",
            ["generate", "--target", t, "--prompt", "x", "--chat-template-config", "[" * 100_000],
            2,
            "nested deeper",
        ),
        # variants: special files
        ("/dev/zero as config.json", target("t_zero_config"), 2, "is not a regular file but a character device"),
        ("a FIFO as hf_quant_config.json", target("t_fifo_quant_config"), 2, "is not a regular file but a FIFO"),
        ("a socket in the model directory", target("t_socket"), 2, "is not a regular file but a socket"),
        (
            "a FIFO as the prompt file",
            ["generate", "--target", t, "--prompt-file", str(d["fifo_prompt"])],
            2,
            "is not a regular file but a FIFO",
        ),
        (
            "/dev/zero as the prompt file",
            ["generate", "--target", t, "--prompt-file", str(d["zero_prompt"])],
            2,
            "is not a regular file but a character device",
        ),
        ("inspect a FIFO in a drafter", ["inspect", str(d["fifo_drafter"])], 2, "is not a regular file"),
        # variants: chat templates
        ("a template multiplying a text by 10^10", target("t_multiply_template"), 2, "a sequence of 10,000,000,000"),
        ("a template raising 10 to 10^8", target("t_power_template"), 2, "an integer of about"),
        ("a template centring in 10^10 columns", target("t_center_template"), 2, "sized by the argument"),
        (
            "a target path of terminal escapes",
            ["generate", "--target", str(r / hostile_round_two.ESCAPES), "--prompt", "x"],
            2,
            "target directory not found",
        ),
    ]


def test_the_table_of_bad_inputs(dirs, capsys):
    table = cases(dirs)
    assert len(table) >= 40
    for name, argv, status, fragment in table:
        capsys.readouterr()
        start = time.perf_counter()
        try:
            got = main(argv)
        except SystemExit as e:  # argparse
            got = e.code
        err = capsys.readouterr().err.strip()
        assert got == status, (name, got, err)
        assert time.perf_counter() - start < 30, name
        if status:
            lines = err.splitlines()
            said = err.replace(str(dirs["root"]), "")  # the fragment must be in the words, not in a path
            assert len(lines) == 1 and fragment in said and "Traceback" not in err, (name, err)
            # nothing a crafted value holds reaches the terminal raw (ESC can retitle or clear it)
            assert not [c for c in err if unicodedata.category(c) in ("Cc", "Cf")], (name, err)
    assert not dirs["marker"].exists(), "code from a model directory ran"


def test_a_fifo_in_place_of_weights_does_not_hang(dirs, tmp_path):
    d = copy(dirs["drafter"], tmp_path / "fifo")
    (d / "model.safetensors").unlink()
    os.mkfifo(d / "model.safetensors")
    t = copy(dirs["target"], tmp_path / "fifo_target")
    (t / "model.safetensors").unlink()
    os.mkfifo(t / "model.safetensors")
    for argv, fragment in (
        (["--target", str(dirs["target"]), "--drafter", str(d)], "is not a regular file"),
        (["--target", str(t)], "is not a regular file"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "dspark.cli", "generate", *argv, "--prompt", "x", "--max-tokens", "2"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and fragment in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_long_prompt_is_told_about_the_target_positions(dirs, capsys):
    """A prompt that fits, with an output that will not: a warning. A prompt that does not fit
    itself: refused before prefill (issue #26; it used to be warned about and prefilled)."""
    t = target_variant(
        dirs["target"], dirs["root"], "short_positions", lambda c: c.__setitem__("max_position_embeddings", 64)
    )
    capsys.readouterr()
    assert main(["generate", "--target", str(t), "--prompt", "x = 1 " * 10, "--max-tokens", "40", "--json"]) == 0
    assert "exceed the 64 positions this target was trained on" in capsys.readouterr().err
    assert main(["generate", "--target", str(t), "--prompt", "x = 1 " * 40, "--max-tokens", "8", "--json"]) == 2
    assert "more than the 64 positions this target holds" in capsys.readouterr().err


def test_a_bug_is_one_line_and_a_log_file(monkeypatch, tmp_path, capsys):
    import dspark.cli.inspect as inspect_command

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path))
    monkeypatch.setattr(inspect_command, "run", lambda a: 1 / 0)
    assert main(["inspect", "whatever"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dspark: internal error (a bug, please report it): ZeroDivisionError") and "\n" not in err
    log = Path(err.split("details in ")[1])
    assert log.parent == tmp_path / "logs" and "Traceback" in log.read_text()


SAYING_AND_SIGNALLED = """
import os, signal, sys, time
from dspark.cli import _interrupt, _run
from dspark.errors import DsparkError
signal.signal(signal.SIGTERM, _interrupt)

def stopping(where):
    try:
        if where == "none":
            return 0
        raise DsparkError("rank 0 of 2 lost its connection to another rank")
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # mlx.launch's, for the same loss
        time.sleep(0.2)

sys.exit(_run(stopping, sys.argv[1]))
"""


@pytest.mark.parametrize("where", ["error", "none"])
def test_a_sigterm_while_an_error_is_said_keeps_the_error(where):
    """A SIGTERM landing while a command's error is on its way out (mlx.launch's, to a rank that
    is saying it lost another) leaves that sentence and its status; with nothing being said it
    interrupts as ever."""
    p = subprocess.run([sys.executable, "-c", SAYING_AND_SIGNALLED, where], capture_output=True, text=True, timeout=60)
    if where == "error":
        assert (p.returncode, p.stderr) == (2, "dspark: error: rank 0 of 2 lost its connection to another rank\n")
    else:
        assert (p.returncode, p.stderr) == (130, "dspark: interrupted\n")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_generate_is_one_line(dirs, sig):
    # SIGINT as a terminal delivers it: a shell without job control starts background commands
    # (`make test &`) with SIGINT ignored, and a child would inherit that
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dspark.cli",
            "generate",
            "--target",
            str(dirs["target"]),
            "--drafter",
            str(dirs["drafter"]),
            "--prompt",
            "x",
            "--max-tokens",
            "100000",
            "--ignore-eos",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # during generation, not during start-up: wait for its first streamed text (a loaded machine can
    # take longer than any fixed sleep to get there)
    ready, _, _ = select.select([p.stdout], [], [], 120)
    assert ready and p.stdout.read(1), "generate streamed nothing in 120 s"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "dspark: interrupted" and "Traceback" not in err


# ----------------------------------------------------------------------------- issue #26, beyond the table
def test_non_finite_logits_are_caught_by_the_first_forward(dirs, monkeypatch, capsys):
    """A bad value in a tensor too large to be checked whole at load (none is, in a tiny model:
    the limit is lowered) still never yields a tau: the first forward's logits are checked."""
    import dspark.finite as finite

    monkeypatch.setattr(finite, "SMALL", 0)  # only the norms are checked whole now
    capsys.readouterr()
    assert main(["generate", "--target", str(dirs["t_inf_weight"]), "--prompt", "x", "--max-tokens", "4"]) == 2
    assert "computes NaN or infinite logits on a first forward" in capsys.readouterr().err
    assert main(["generate", "--target", str(dirs["t_nan_embed"]), "--prompt", "x", "--max-tokens", "4"]) == 2
    assert "computes NaN or infinite logits on a first forward" in capsys.readouterr().err


def _one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    return r.stderr


def test_what_rust_and_the_terminal_say_is_one_line(dirs):
    """Run as a user runs it: a tokenizer whose regex makes Rust panic (Rust prints its own report,
    with a backtrace here, before Python sees the PanicException), and a prompt with bytes that
    are not UTF-8, each end in one line of stderr."""
    cli = [sys.executable, "-m", "dspark.cli", "generate", "--max-tokens", "4"]
    env = dict(os.environ, RUST_BACKTRACE="1")
    r = subprocess.run(
        [*cli, "--target", str(dirs["t_panic_tokenizer"]), "--prompt", "hello"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "could not encode this prompt (PanicException" in _one_line(r)
    r = subprocess.run(
        [
            *cli[:3],
            "generate",
            "--target",
            str(dirs["target"]),
            "--prompt",
            b"caf\xff x".decode("utf-8", "surrogateescape"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "the prompt is not valid text" in _one_line(r)


def test_the_crash_reporter_cannot_crash(monkeypatch, tmp_path, capsys):
    """A bug while the command line holds undecodable bytes (kept as surrogates), with an exception
    whose text holds terminal escapes, or one whose str() itself fails: still one line and a log."""
    import dspark.cli.inspect as inspect_command

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["dspark", "inspect", b"caf\xff".decode("utf-8", "surrogateescape")])
    for bug in (ValueError("\x1b]0;pwned\x07"), Unprintable()):
        monkeypatch.setattr(inspect_command, "run", lambda a, bug=bug: (_ for _ in ()).throw(bug))
        assert main(["inspect", "whatever"]) == 1
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "\x1b" not in err and "details in" in err, err
        assert "Traceback" in Path(err.split("details in ")[1]).read_text()


@pytest.mark.parametrize(
    "record",
    [
        {"verify_ms": []},
        {"threads": {"step": 10**6}},
        {"draft_ms": float("nan")},
        {"verify_ms": ["1.0"]},
        {"step_ms": -2.0},
        {"context": "256"},
    ],
    ids=["verify_ms []", "10^6 BLAS threads", "a NaN draft", "times as text", "a negative step", "a context as text"],
)
def test_a_cached_costs_file_out_of_range_is_measured_again(dirs, tmp_path, monkeypatch, record):
    """The audit's cases: a costs cache asking for 10^6 BLAS threads hung the run, one with
    ``verify_ms: []`` crashed it. A cache is checked whole; a bad one is measured again."""
    from dspark import costs
    from dspark.loading import load_drafter, load_target

    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path))
    target = load_target(dirs["target"])
    drafter = load_drafter(dirs["drafter"], target)
    good = costs.Costs(verify_ms=(1.0, 1.5, 2.0, 2.5, 3.0), draft_ms=1.0, step_ms=0.8, threads={"step": 1})
    measured = []
    monkeypatch.setattr(costs, "measure", lambda *a, **k: measured.append(1) or good)
    key = costs.key_for(target, drafter, 4)
    (tmp_path / f"{key}.json").write_text(json.dumps({**good.to_dict(), **record}))
    assert costs.load_or_measure(target, drafter, 4) == good and measured == [1]
    assert costs.load_or_measure(target, drafter, 4) == good and measured == [1]  # the good record is kept
