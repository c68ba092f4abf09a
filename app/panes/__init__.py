"""The live panes of the main window (Qt only, no model code)."""
