"""Drafter training and calibration (like mlx-lm's ``tuner/``): data, losses, the trainer, the
whole run and STS calibration. The commands ``dspark train`` and ``dspark calibrate`` are
:mod:`dspark.cli.train` and :mod:`dspark.cli.calibrate`."""
