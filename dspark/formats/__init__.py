"""The drafter checkpoint formats people have, one file each, recognised from their files and
config keys (``dspark.modeldir.drafter_format``):

- ``native``: ``dspark-drafter``, this project's own (``dspark.drafter.DflashDrafter``);
- ``zlab``: z-lab DFlash heads (``dflash_config``; no embedding or head of their own);
- ``dflash2``: DFlash 2 heads (``DFlash2DraftModel``): z-lab's, with block convolutions and a
  candidate selector;
- ``deepspec``: DeepSeek DeepSpec ``Gemma4DSparkModel`` (DSpark, and its DFlash baseline with
  the heads off);
- ``speculators``: vLLM speculators DSpark / DFlash heads (``speculators_config``), possibly
  with a reduced draft vocabulary and its ``d2t`` offsets.

The published formats read into a ``base.Spec`` (validated, nothing allocated) that builds a
``base.CheckpointDrafter``; ``layers`` holds their transformer layers, ``quant`` mlx's quantized
layout, which any format may be stored in. ``dspark.loading.load_drafter`` is the one entry point.
Only ``config.json`` and ``*.safetensors`` are read: a directory that asks for code (``auto_map``,
``*.py``) or ships pickles is refused, and nothing in it is ever executed.
"""
