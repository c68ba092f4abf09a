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
    d = Difference(index=3, kind="tie", speculative=5, plain=6, logprobs=(-1.5, -1.5), one_pass_logprobs=(-1.5, -1.5),
                   tolerance=1e-6, drift=0.0)
    # 0.1.0's Verdict.to_dict, through JSON (tuples come back as lists)
    old = json.loads(json.dumps({"identical_to_baseline": False, "first_difference": d.to_dict(), "lossless": True}))
    new = json.loads(json.dumps(Verdict(False, d).to_dict()))
    assert Verdict.from_dict(old) == Verdict(False, d) == Verdict.from_dict(new)
