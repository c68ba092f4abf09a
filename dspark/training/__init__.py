"""Drafter training and calibration (like mlx-lm's ``tuner/``): data, losses, the trainer, the
whole run and STS calibration. ``dspark train`` and ``dspark calibrate``
are ``train_cli`` and ``calibrate_cli``."""
