"""Opening a target and a drafter (``dspark.loading``) beyond what each format reads
(``test_formats.py``): the drafter's measured profile, and a damaged one that does not stop it."""

from __future__ import annotations

import json


def test_load_drafter_reads_the_profile_and_a_damaged_one_does_not_stop_it(tmp_path, monkeypatch):
    from tiny import write_tiny_target_dir

    from dspark.cli import main
    from dspark.loading import load_drafter, load_target

    monkeypatch.setenv("DSPARK_PROFILES_DIR", str(tmp_path / "profiles"))  # never the person's records
    target_dir = write_tiny_target_dir(tmp_path / "target")
    assert (
        main(["init", "--target", str(target_dir), "--out", str(tmp_path / "d"), "--block-size", "3", "--layers", "1"])
        == 0
    )
    target = load_target(target_dir)
    (tmp_path / "d" / "dspark-profile.json").write_text(
        json.dumps(
            {
                "version": 1,
                "per_position_acceptance": [0.6, 0.4, 0.2],
                "block_size": 3,
                "target_id": target.target_id,
                "target_fingerprint": target.weights_fingerprint,
                "templated": None,
                "thinking": None,
                "context_length": 256,
                "source": "calibrate",
                "prompts": 4,
                "rounds": 40,
            }
        )
    )
    from dspark.engine import measured_acceptance

    assert measured_acceptance(load_drafter(tmp_path / "d", target), target) == [0.6, 0.4, 0.2]
    (tmp_path / "d" / "dspark-profile.json").write_text("{")
    said = []
    drafter = load_drafter(tmp_path / "d", target, say=said.append)
    assert drafter.profile is None and not said  # dspark diagnose names it; loading goes on
