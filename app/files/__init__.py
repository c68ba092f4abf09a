"""What the app reads and writes on disk: saved runs and their replay, ``dspark bench`` results,
exports and the run history, each file checked whole before it is shown; and where things are
kept (the settings file, the app's folders)."""
