"""User-facing errors: one clear sentence, no traceback (the CLI and the app print ``str(e)``)."""


class DsparkError(Exception):
    """Something the user can fix: a path, a file, an argument."""


class NotGemma4Error(DsparkError):
    pass


class DrafterMismatchError(DsparkError):
    pass
