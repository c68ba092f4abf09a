"""The app's Qt-free session model, driven by plain worker messages (no window, no models)."""

from dspark.events import CommittedToken, RoundEvent, Source, Summary
from dspark.lossless import Difference, Verdict
from dspark_studio.messages import Checked, JobDone, RoundDone, RunDone, RunSpec, RunStarted
from dspark_studio.runs import BASELINE
from dspark_studio.session import Session

RUNS = [RunSpec("d1", "/d1"), RunSpec(BASELINE, None)]


def event(index: int, accepted: int, width: int, tokens: list[int], source=Source.CORRECTION) -> RoundEvent:
    committed = tuple(CommittedToken(t, f"t{t}", Source.ACCEPTED if k < accepted else source, index, k, 0.5)
                      for k, t in enumerate(tokens))
    return RoundEvent(index, 0, tuple(range(width)), (0.5,) * width, None, width, accepted, committed,
                      0.01, 0.01, 0.1 * (index + 1), 0, 10.0)


def summary(method: str, tokens: list[int], rounds: int) -> Summary:
    return Summary(method, tuple(tokens), "", (2, 3, 4), rounds, (), (), 1.0, 0.0, (), 100.0 if method == "baseline" else 150.0,
                   0.01, 0.01, 0, 0, 1.0, "length")


def play(s: Session, job, prompt_index=0, key0=1, tokens=(1, 2, 3)):
    s.apply(RunStarted(job.id, key0, "d1", "speculative", "/d1", "p", prompt_index, {}))
    s.apply(RoundDone(key0, event(0, 2, 3, list(tokens)), ("a", "b", "c")))
    s.apply(RunDone(key0, summary("speculative", list(tokens), 1)))
    s.apply(RunStarted(job.id, key0 + 1, BASELINE, "baseline", None, "p", prompt_index, {}))
    for i, t in enumerate(tokens):
        s.apply(RoundDone(key0 + 1, event(i, 0, 0, [t], Source.TARGET), ()))
    s.apply(RunDone(key0 + 1, summary("baseline", list(tokens), len(tokens))))
    s.apply(Checked(key0, Verdict(True)))


def test_a_run_job_fills_the_view():
    s = Session()
    job = s.new_job("run", "/t", ["p"], RUNS, {"temperature": 0.0})
    assert s.busy and s.new_job("run", "/t", ["p"], RUNS, {}) is None  # one job at a time
    play(s, job)
    s.apply(JobDone(job.id, True, False))
    v = s.view()
    assert not v.busy and v.kind == "run" and v.rows == ()
    assert v.spec.label == "d1" and v.base.method == "baseline"
    f = v.spec.figures()
    assert (f.rounds, f.tokens, f.tau, f.acceptance_rate) == (1, 3, 3.0, 2 / 3)


def test_messages_of_an_older_job_are_ignored_and_results_survive_a_failed_start():
    s = Session()
    first = s.new_job("run", "/t", ["p"], RUNS, {})
    play(s, first)
    s.apply(JobDone(first.id, True, False))
    version = s.version
    second = s.new_job("compare", "/t", ["p"], RUNS, {})
    assert not s.apply(RunStarted(first.id, 99, "d1", "speculative", "/d1", "p", 0, {}))  # stale
    s.apply(JobDone(second.id, False, False))  # failed before any run started
    v = s.view()
    assert v.kind == "run" and v.spec.key == 1 and s.version > version  # the first job's runs stay shown


def test_compare_rows_pool_prompts_and_check_identity():
    s = Session()
    job = s.new_job("compare", "/t", ["p0", "p1"], RUNS, {})
    play(s, job, prompt_index=0, key0=1)
    play(s, job, prompt_index=1, key0=3, tokens=(4, 5, 6))
    s.apply(JobDone(job.id, True, False))
    rows = {r["label"]: r for r in s.view().rows}
    assert set(rows) == {"d1", BASELINE}
    assert rows["d1"]["runs"] == 2 and rows["d1"]["identical"] == "✓"
    assert rows["d1"]["speedup"] == 1.5 and rows["d1"]["tau"] == 3.0


def test_same_as_plain_marks_ties_and_mismatches():
    from dspark_studio.runs import same_as_plain

    tie = Verdict(False, Difference(7, "tie", 3, 4, (-2.0, -2.0)))
    bad = Verdict(False, Difference(2, "mismatch", 3, 4, (-9.0, -0.5)))
    assert same_as_plain([Verdict(True)]) == "✓" and same_as_plain([tie]) == "≈ tie at token 7"
    assert same_as_plain([Verdict(True), tie, tie]) == "≈ 2 ties" and same_as_plain([tie, bad]) == "✗"
    assert same_as_plain([Verdict(True), None]) is None and same_as_plain([]) is None
