"""The main window and what hangs on it: its menus and their actions, its dialogs, presentation
mode, its geometry and the choices it keeps between sessions. Importing this package imports
none of them (the main window imports mlx-lm, which must wait for the device to be chosen)."""
