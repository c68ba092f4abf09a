"""The live panes of the main window, each drawing the session's ``View`` (Qt only, no model code):
the right-hand side's tabs (``results``) and what they hold, the left-hand controls, and the theme."""
