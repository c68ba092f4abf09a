"""DSpark Studio: the Qt desktop front end. Only ``app.worker`` touches MLX."""

#: First on the command line: the rest is a ``dspark`` command (``dspark-studio --dspark train ...``).
#: A frozen bundle ships no console scripts, so the Train tab starts ``dspark train`` as this
#: executable with it (``dspark_studio.state.training.dspark_program``; ``dspark_studio.main``).
DSPARK = "--dspark"
