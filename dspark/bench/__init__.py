"""``dspark bench``: speculative decoding against plain mlx-lm decoding, measured honestly.

A warm-up, then ``--repeats`` rounds over the prompts; within each prompt every arm runs once,
in an order that rotates, so the arms share the machine's changing load. Each trial generates
exactly ``--max-tokens`` tokens (EOS ignored). Every trial is appended to ``trials.jsonl`` and
``trials.csv`` in ``--out`` as it finishes; ``summary.json`` holds the per-arm figures, the
environment and this machine's measured costs (:mod:`dspark.bench.report` defines each figure).

Layout: ``trials`` (``run``: the arms built, the loop, each trial judged, the files kept),
``arms`` (the ways of generating compared), ``report`` (the figures and the files; no MLX),
``contexts`` (prompts padded to the lengths ``--context`` asks for), ``peer_server`` (a peer
package's loop over a pipe). The command is :mod:`dspark.cli.bench`.
"""
