"""The app's state and its rules, without Qt or MLX (napari's model side): what the person chose,
what ran, what the window and the worker say to each other, and what the panes are shown."""
