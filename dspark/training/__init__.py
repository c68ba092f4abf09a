"""Drafter training and calibration (like mlx-lm's ``tuner/``): data, losses, the trainer, the
whole run, STS calibration, and their command lines (``dspark train``, ``dspark calibrate``)."""
