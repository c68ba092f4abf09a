"""Settings dataclasses are the one source of every knob: the CLI's options, validation, the
app's form and the demo recipe all come from their fields."""

import argparse

import pytest

from dspark.config import GenerationConfig
from dspark.drafter import DflashConfig
from dspark.errors import DsparkError
from dspark.options import add_options, check_options, coerce, describe, from_args
from dspark.training.trainer import TrainSettings


def parse(cls, argv):
    ap = argparse.ArgumentParser()
    add_options(ap, cls)
    return from_args(cls, ap.parse_args(argv))


def test_every_field_is_an_option_with_help():
    for cls in (GenerationConfig, DflashConfig, TrainSettings):
        specs = describe(cls)
        assert [s.name for s in specs] == list(cls.__dataclass_fields__)
        assert all(s.help for s in specs)


def test_cli_defaults_and_flags_come_from_the_fields():
    assert parse(GenerationConfig, []) == GenerationConfig()
    g = parse(
        GenerationConfig,
        ["--max-tokens", "9", "--top-k", "3", "--block-size", "4", "--ignore-eos", "--policy", "threshold:0.4"],
    )
    assert (g.max_tokens, g.top_k, g.block_size, g.stop_at_eos, g.policy) == (9, 3, 4, False, "threshold:0.4")
    d = parse(DflashConfig, ["--layers", "3", "--taps", "1,4,7", "--no-markov"])
    assert (d.num_layers, d.tap_layers, d.markov, d.confidence) == (3, (1, 4, 7), False, True)
    t = parse(TrainSettings, ["--batch", "8", "--self-distill", "--no-compile", "--max-sequences", "5"])
    assert (t.batch_anchors, t.self_distill, t.compile, t.max_sequences) == (8, True, False, 5)


@pytest.mark.parametrize(
    "value, message",
    [
        (GenerationConfig(max_tokens=0), "max-tokens must be between 1"),
        (GenerationConfig(temperature=float("nan")), "temperature must be a finite number"),
        (GenerationConfig(top_p=1.5), "top-p must be between 0 and 1"),
        (GenerationConfig(seed=-1), "seed must be between 0"),
        (GenerationConfig(block_size=10**6), "block-size must be between 0 and 64"),
        (DflashConfig(markov_rank=-1), "markov-rank must be between 1"),
        (DflashConfig(num_layers=10**6), "layers must be between 1 and 64"),
        (TrainSettings(steps=0), "steps must be between 1"),
    ],
)
def test_out_of_range_values_are_refused_in_one_sentence(value, message):
    with pytest.raises(DsparkError, match=message):
        check_options(value)


@pytest.mark.parametrize("text", ["sometimes", "fixed:-1", "fixed:x", "threshold:2", "threshold", "auto:3", ""])
def test_a_bad_verify_policy_is_refused_in_one_sentence(text):
    with pytest.raises(DsparkError, match="is not a verify policy: a verify policy is fixed, fixed:K"):
        GenerationConfig(policy=text).check()


def test_top_k_beyond_the_vocabulary_is_refused():
    with pytest.raises(DsparkError, match="larger than the target's vocabulary"):
        GenerationConfig(top_k=500).check(vocab_size=300)


def test_coerce_keeps_defaults_for_bad_values_and_says_which():
    bad = []
    g = coerce(
        GenerationConfig,
        {"max_tokens": "abc", "temperature": "0.7", "top_p": "7", "block_size": "", "stop_at_eos": "false"},
        lambda name, value: bad.append(name),
    )
    assert g == GenerationConfig(temperature=0.7, stop_at_eos=False)
    assert sorted(bad) == ["max_tokens", "top_p"]


def test_every_bundled_prompt_set_reads_and_says_what_it_is():
    from dspark import prompts

    sets = prompts.prompt_sets()
    assert list(sets)[0] == prompts.DEFAULT and {"chat", "maths", "code", "stdlib-heldout"} <= set(sets)
    for key, s in sets.items():
        assert s.name and s.description and len(s.prompts) >= 5, key
        assert len(set(s.prompts)) == len(s.prompts) and all(p.strip() for p in s.prompts), key


def test_a_flag_that_turns_an_option_off_says_so_in_its_help():
    """--ignore-eos and --no-markov clear a field that is on by default: their help must not read
    as if the flag turned it on."""
    import argparse

    from dspark.config import DflashConfig, GenerationConfig
    from dspark.options import add_options

    for cls, flag in (
        (GenerationConfig, "--ignore-eos"),
        (GenerationConfig, "--ignore-chat-template"),
        (DflashConfig, "--no-markov"),
    ):
        parser = argparse.ArgumentParser()
        add_options(parser, cls)
        action = next(a for a in parser._actions if flag in a.option_strings)
        assert action.help.startswith("turn off (on by default): "), (flag, action.help)


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command, parser) of every dspark command, as ``dspark X`` builds it."""
    from dspark.cli import build_parser

    return [
        (name, p)
        for a in build_parser()._actions
        if isinstance(a, argparse._SubParsersAction)
        for name, p in a.choices.items()
    ]


def test_help_names_the_default_of_every_option_that_has_one():
    """docs/command-line.md: "--help on any command lists every option with its default"."""
    from dspark.options import ShowDefaults

    parsers = _every_parser()
    assert {"generate", "train", "bench", "make-demo", "export", "diagnose"} <= {n for n, _ in parsers}
    silent = []
    for name, parser in parsers:
        formatter = parser._get_formatter()
        assert isinstance(formatter, ShowDefaults), name
        for a in parser._actions:
            if (
                a.option_strings
                and a.default not in (None, argparse.SUPPRESS)
                and not isinstance(a, ShowDefaults.SWITCHES)
            ):
                shown = formatter._expand_help(a) if a.help else ""
                if "default" not in shown:
                    silent.append(f"dspark {name} {a.option_strings[0]}")
    assert not silent, silent


def test_every_command_has_one_shape_and_the_list_of_commands_loads_no_mlx():
    """Each subcommand is a module of ``dspark.cli`` with ``HELP``, ``add_parser`` and ``run``;
    ``dspark --help`` builds none of their parsers, so it starts without MLX."""
    import subprocess
    import sys

    from dspark.cli import COMMANDS

    for name, command in COMMANDS.items():
        assert isinstance(command.HELP, str) and callable(command.add_parser) and callable(command.run), name
    probe = (
        "import sys, contextlib, io\nfrom dspark.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])\n"
        "print(sorted(m for m in ('mlx', 'mlx_lm', 'numpy') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
