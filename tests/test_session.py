"""The app's Qt-free session model, driven by plain worker messages (no window, no models)."""

from dspark.events import CommittedToken, RoundEvent, Source, Summary
from dspark.lossless import Difference, Verdict
from dspark_studio.state.messages import Arm, Checked, JobDone, RoundDone, RunDone, RunStarted
from dspark_studio.state.runs import PLAIN_LABEL
from dspark_studio.state.session import Session

ARMS = [Arm("d1", "/d1"), Arm(PLAIN_LABEL, None)]


def event(
    index: int,
    accepted: int,
    width: int,
    tokens: list[int],
    source=Source.CORRECTION,
    generated: int = 0,
    seconds: float = 0.1,
) -> RoundEvent:
    """One round; ``generated`` tokens so far (this round's included) after ``seconds`` of decoding."""
    committed = tuple(
        CommittedToken(
            id=t,
            text=f"t{t}",
            source=Source.ACCEPTED if k < accepted else source,
            round=index,
            position=k,
            target_prob=0.5,
        )
        for k, t in enumerate(tokens)
    )
    generated = generated or len(tokens)
    return RoundEvent(
        index=index,
        anchor=0,
        drafted=tuple(range(width)),
        draft_probs=(0.5,) * width,
        confidences=None,
        verify_width=width,
        accepted=accepted,
        committed=committed,
        draft_seconds=0.01,
        verify_seconds=0.01,
        elapsed_seconds=seconds + 0.05,
        tokens_generated=generated,
        tokens_per_sec=generated / seconds,
    )


def summary(method: str, tokens: list[int], rounds: int, tps: float) -> Summary:
    return Summary(
        method=method,
        tokens=tuple(tokens),
        text="",
        prompt_tokens=(2, 3, 4),
        rounds=rounds,
        accepted_lengths=(),
        verify_widths=(),
        tau=1.0,
        acceptance_rate=0.0,
        per_position_acceptance=(),
        tokens_per_sec=tps,
        ttft_seconds=0.01,
        prefill_seconds=0.01,
        draft_seconds=0,
        verify_seconds=0,
        total_seconds=1.0,
        finish_reason="length",
    )


def play(s: Session, job, prompt_index=0, key0=1, tokens=tuple(range(10, 22)), speculative_tps=150.0, plain_tps=100.0):
    """A speculative run (rounds of 4 tokens at ``speculative_tps``) and plain decoding of one prompt."""
    tokens = list(tokens)
    s.apply(
        RunStarted(
            job=job.id,
            key=key0,
            label="d1",
            method="speculative",
            drafter="/d1",
            prompt="p",
            prompt_index=prompt_index,
            config={},
        )
    )
    for i in range(0, len(tokens), 4):
        n = min(i + 4, len(tokens))
        made = event(i // 4, 3, 3, tokens[i:n], generated=n, seconds=n / speculative_tps)
        s.apply(RoundDone(key0, made, ("a", "b", "c")))
    s.apply(RunDone(key0, summary("speculative", tokens, (len(tokens) + 3) // 4, speculative_tps)))
    s.apply(
        RunStarted(
            job=job.id,
            key=key0 + 1,
            label=PLAIN_LABEL,
            method="plain",
            drafter=None,
            prompt="p",
            prompt_index=prompt_index,
            config={},
        )
    )
    for i, t in enumerate(tokens):
        made = event(i, 0, 0, [t], Source.TARGET, generated=i + 1, seconds=(i + 1) / plain_tps)
        s.apply(RoundDone(key0 + 1, made, ()))
    s.apply(RunDone(key0 + 1, summary("plain", tokens, len(tokens), plain_tps)))
    s.apply(Checked(key0, Verdict(True)))


def test_a_run_job_fills_the_view():
    s = Session()
    job = s.new_job("run", "/t", ["p"], ARMS, config={"temperature": 0.0})
    assert s.busy and s.new_job("run", "/t", ["p"], ARMS, config={}) is None  # one job at a time
    play(s, job)
    s.apply(JobDone(job.id, True, False))
    v = s.view()
    assert not v.busy and v.kind == "run" and v.rows == ()
    assert v.speculative.label == "d1" and v.plain.method == "plain"
    f = v.speculative.figures()
    assert (f.rounds, f.tokens, f.tau, f.acceptance_rate) == (3, 12, 4.0, 1.0)


def test_messages_of_an_older_job_are_ignored_and_results_survive_a_failed_start():
    s = Session()
    first = s.new_job("run", "/t", ["p"], ARMS, config={})
    play(s, first)
    s.apply(JobDone(first.id, True, False))
    version = s.version
    second = s.new_job("compare", "/t", ["p"], ARMS, config={})
    assert not s.apply(
        RunStarted(
            job=first.id, key=99, label="d1", method="speculative", drafter="/d1", prompt="p", prompt_index=0, config={}
        )
    )  # stale
    s.apply(JobDone(second.id, False, False))  # failed before any run started
    v = s.view()
    assert v.kind == "run" and v.speculative.key == 1 and s.version > version  # the first job's runs stay shown


def test_compare_rows_pool_prompts_and_check_identity():
    s = Session()
    job = s.new_job("compare", "/t", ["p0", "p1"], ARMS, config={})
    play(s, job, prompt_index=0, key0=1)
    play(s, job, prompt_index=1, key0=3, tokens=range(30, 42))
    s.apply(JobDone(job.id, True, False))
    rows = {r["label"]: r for r in s.view().rows}
    assert set(rows) == {"d1", PLAIN_LABEL}
    assert rows["d1"]["runs"] == 2 and rows["d1"]["identical"] == "✓"
    assert abs(rows["d1"]["speedup"] - 1.5) < 1e-9 and rows["d1"]["tau"] == 4.0
    assert rows["d1"]["compared_tokens"] == 24 and rows["d1"]["planned"] == 2


def test_same_as_plain_marks_ties_and_mismatches():
    from dspark_studio.state.runs import same_as_plain

    tie = Verdict(False, Difference(index=7, kind="tie", speculative=3, plain=4, logprobs=(-2.0, -2.0)))
    bad = Verdict(False, Difference(index=2, kind="mismatch", speculative=3, plain=4, logprobs=(-9.0, -0.5)))
    assert same_as_plain([Verdict(True)]) == "✓" and same_as_plain([tie]) == "≈ tie at token 7"
    assert same_as_plain([Verdict(True), tie, tie]) == "≈ 2 ties" and same_as_plain([tie, bad]) == "✗"
    assert same_as_plain([Verdict(True), None]) is None and same_as_plain([]) is None


def test_a_run_after_a_comparison_leaves_the_comparison_and_its_focus():
    s = Session()
    arms = [Arm("d1", "/d1"), Arm("d2", "/d2"), Arm(PLAIN_LABEL, None)]
    job = s.new_job("compare", "/t", ["p0"], arms, config={}, focus="d1")
    play(s, job)  # d1, then plain decoding
    s.apply(
        RunStarted(
            job=job.id, key=9, label="d2", method="speculative", drafter="/d2", prompt="p", prompt_index=0, config={}
        )
    )  # d2 ran last
    s.apply(RoundDone(9, event(0, 1, 3, [5, 6]), ("a", "b", "c")))
    s.apply(JobDone(job.id, True, False))
    v = s.view()
    assert v.focus == "d1" and v.speculative.label == "d1"  # the drafter asked for, not the last one run
    s.set_focus("d2")
    assert s.view().speculative.label == "d2"
    compared = s.view().comparison
    run = s.new_job("run", "/t", ["p"], ARMS, config={})
    play(s, run, key0=20)
    s.apply(JobDone(run.id, True, False))
    v = s.view()
    assert v.kind == "run" and [r.key for r in v.runs] == [20, 21]
    assert v.comparison == compared and [r["label"] for r in v.rows] == ["d1", PLAIN_LABEL, "d2"]
    s.show_tab("compare")
    assert s.view().tab == "compare" and s.view().focus == "d2"


def test_a_sampled_comparison_compares_each_prompt_over_the_tokens_both_runs_made():
    s = Session()
    job = s.new_job("compare", "/t", ["p0"], ARMS, config={"temperature": 1.0})
    s.apply(
        RunStarted(
            job=job.id, key=1, label="d1", method="speculative", drafter="/d1", prompt="p", prompt_index=0, config={}
        )
    )
    for i in range(3):  # EOS after 12 tokens, 4 a round, at 40 tok/s
        s.apply(RoundDone(1, event(i, 3, 3, [7] * 4, generated=4 * (i + 1), seconds=(i + 1) / 10), ()))
    s.apply(RunDone(1, summary("speculative", [7] * 12, 3, 40.0)))
    s.apply(
        RunStarted(
            job=job.id, key=2, label=PLAIN_LABEL, method="plain", drafter=None, prompt="p", prompt_index=0, config={}
        )
    )
    for i in range(100):  # 20 tok/s for its first 12 tokens, then much faster
        secs = (i + 1) / 20 if i < 12 else 0.6 + (i - 11) / 1000
        s.apply(RoundDone(2, event(i, 0, 0, [7], Source.TARGET, generated=i + 1, seconds=secs), ()))
    s.apply(RunDone(2, summary("plain", [7] * 100, 100, 100 / 0.688)))
    s.apply(JobDone(job.id, True, False))
    row = s.view().row("d1")
    assert not row["same_length"] and row["compared_tokens"] == 12
    (speculative, plain) = row["compared_rates"]
    assert abs(speculative - 40.0) < 1e-9 and abs(plain - 20.0) < 1e-9 and abs(row["speedup"] - 2.0) < 1e-9
    assert row["tokens_per_sec"] == 40.0  # the table's whole-run rate is still there


def test_the_choices_mark_a_bad_drafter_and_run_falls_back_to_a_good_one(tmp_path):
    from dspark_studio.state.choices import Choices

    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    c = Choices()
    c.add_drafter(str(bad))
    c.add_drafter(str(good))
    assert c.run_drafter() == str(bad) and c.checked() == [str(bad), str(good)]
    version = c.version
    c.mark(str(bad), "drafter bad: not valid JSON")
    assert c.version > version and c.error(str(bad)) == "drafter bad: not valid JSON"
    assert c.run_drafter() == str(good) and c.checked() == [str(good)] and c.usable() == [str(good)]
    c.add_drafter("/no/such/dir", select=True)  # not a directory: marked at once, never selected
    assert "not a directory" in c.error("/no/such/dir") and c.run_drafter() == str(good)


def test_a_restored_prompt_of_the_set_is_found_in_it_and_a_typed_one_is_kept():
    from dspark_studio.state.choices import TYPED, Choices

    c = Choices({"set": ["a\n", "b\n", "c\n"]})
    c.set_prompt("c\n")  # as a restart or a paste puts it in the box
    assert c.counter() == "3 / 3" and c.caption() == "Prompt 3 of 3 · c"
    c.set_prompt("mine")
    assert c.counter() == "typed" and c.caption() == "Your prompt · mine"
    assert c.step_prompt(1) and c.prompt == "a\n" and c.prompt_sets[TYPED] == ["mine"]


def test_costs_measured_on_another_target_are_dropped_and_that_is_drawn():
    from dspark_studio.state.messages import CostsMeasured, Loaded

    s = Session()
    s.apply(CostsMeasured("/d1", {"verify_ms": [1.0], "draft_ms": 1.0, "step_ms": 1.0}))
    s.loaded(Loaded(target="/t1", target_id="t1", drafters={}, errors={}))
    assert s.view().costs == {} and s.costs == {}
    s.apply(CostsMeasured("/d1", {"verify_ms": [1.0], "draft_ms": 1.0, "step_ms": 1.0}))
    version = s.version
    s.loaded(
        Loaded(target="/t2", target_id="t2", drafters={}, errors={})
    )  # another target: the costs were not measured on it
    assert s.costs == {} and s.version > version  # the panes redraw without them


def test_run_with_a_bad_drafter_selected_is_one_message_and_starts_nothing(tmp_path):
    s = Session()
    s.choices.set_target(str(tmp_path))
    s.choices.add_drafter("/no/such/drafter", select=True)
    s.choices.select("/no/such/drafter")
    assert s.run_job() is None and not s.busy and s.message.startswith("cannot run with drafter drafter")
    s.choices.remove_drafter("/no/such/drafter")
    job = s.run_job()
    assert job is not None and [a.label for a in job.arms] == [PLAIN_LABEL] and s.message == ""
