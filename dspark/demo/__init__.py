"""The bundled demo models: the demo tokenizer, the demo target's pretraining (on the stdlib
corpus, ``dspark.corpus``) and ``dspark make-demo`` (build, train both drafters, measure)."""
