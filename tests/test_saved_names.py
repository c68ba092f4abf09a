"""Files saved before a concept's rename (#39: one name per thing) still read the same: each
sample under tests/saved/ is what the previous version wrote, byte for byte where it was run."""

import json
from pathlib import Path

from dspark.lossless import Difference, Verdict

SAVED = Path(__file__).parent / "saved"


def test_a_verdict_saved_as_identical_to_baseline_reads_as_identical():
    # `dspark generate --baseline --json` of 0.1.0 on a tiny target (tests/tiny.py), as it printed it
    old = json.loads((SAVED / "generate-json-0.1.0.json").read_text())
    assert "identical_to_baseline" in old and "identical" not in old
    v = Verdict.from_dict(old)
    assert v == Verdict(True, None) and v.lossless == old["lossless"]
    assert Verdict.from_dict(v.to_dict()) == v  # the new key reads the same


def test_a_saved_first_difference_reads_back_under_either_key():
    d = Difference(
        index=3,
        kind="tie",
        speculative=5,
        plain=6,
        logprobs=(-1.5, -1.5),
        one_pass_logprobs=(-1.5, -1.5),
        tolerance=1e-6,
        drift=0.0,
    )
    # 0.1.0's Verdict.to_dict, through JSON (tuples come back as lists)
    old = json.loads(json.dumps({"identical_to_baseline": False, "first_difference": d.to_dict(), "lossless": True}))
    new = json.loads(json.dumps(Verdict(False, d).to_dict()))
    assert Verdict.from_dict(old) == Verdict(False, d) == Verdict.from_dict(new)


def _replayed(path: Path):
    """A saved run opened as File ▸ Open run opens it, and played through a session to its end."""
    from dspark_studio.files.replay import open_playlist, replay_job
    from dspark_studio.state.playlist import Playlist
    from dspark_studio.state.session import Session

    session, playlist = Session(), Playlist()
    assert open_playlist(session, playlist, [str(path)]), session.message
    rec, messages = replay_job(session, playlist, 0)
    for _at, message in messages:
        session.apply(message)
    return rec, session.view()


def test_a_run_saved_with_method_baseline_reads_as_plain_decoding(tmp_path):
    # the app's File ▸ Export of a run (a drafter and plain decoding, 10 tokens on tests/tiny.py's
    # target) by 0.1.0, as it wrote it; only the target's folder and the machine's name replaced
    old_path = SAVED / "run-0.1.0.json"
    old = json.loads(old_path.read_text())
    assert [r["method"] for r in old["runs"]] == ["speculative", "baseline"]
    assert [r["summary"]["method"] for r in old["runs"]] == ["speculative", "baseline"]
    new = json.loads(old_path.read_text())  # the same file under today's name
    for r in new["runs"]:
        r["method"] = r["summary"]["method"] = "plain" if r["method"] == "baseline" else r["method"]
    new_path = tmp_path / "run-new.json"
    new_path.write_text(json.dumps(new))

    (rec_old, view_old), (rec_new, view_new) = _replayed(old_path), _replayed(new_path)
    assert [r.method for r in rec_old.runs] == ["speculative", "plain"]
    assert [r.summary.method for r in rec_old.runs] == ["speculative", "plain"]
    assert rec_old.runs == rec_new.runs
    from dspark_studio.state.runs import PLAIN_LABEL, speedup

    assert view_old.plain is not None and view_old.plain.label == PLAIN_LABEL and view_old.plain.method == "plain"
    assert view_old.plain.summary == view_new.plain.summary
    assert view_old.speculative.summary == view_new.speculative.summary
    assert speedup(view_old.speculative, view_old.plain) == speedup(view_new.speculative, view_new.plain)


def test_generate_baseline_is_still_generate_plain():
    import dspark

    assert dspark.generate_baseline is dspark.generate_plain  # users' code written against 0.1.0
