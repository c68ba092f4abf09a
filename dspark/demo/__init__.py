"""The bundled demo models: the stdlib corpus, the demo tokenizer, the demo target's
pretraining and ``dspark make-demo`` (build, train both drafters, measure)."""
