"""The bundled resources (demo models, prompt sets, icons); installed as ``dspark_resources``.

Find them with ``dspark.resources``, never by path arithmetic."""
