"""File ▸ Download…: the published Gemma-4 targets and drafters (``dspark.hub.PUBLISHED``), or any
Hugging Face name, fetched into the Hugging Face cache with a progress bar; the size to
download and the free disk are shown first. Downloading is file I/O only (no MLX), on a thread
of its own so the window stays responsive."""

from __future__ import annotations

import re
import shutil

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
)
from tqdm.auto import tqdm

from dspark import hub
from dspark.errors import DsparkError

REPO_ROLE = Qt.UserRole


def _progress_class(report):
    """A tqdm class that forwards huggingface_hub's progress to ``report(done, total, unit)``."""

    class Bridge(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            super().__init__(*args, file=_Null(), **kwargs)

        def update(self, n=1):
            out = super().update(n)
            report(int(self.n), int(self.total or 0), str(self.unit or ""))
            return out

    return Bridge


class _Null:
    def write(self, *_):
        pass

    def flush(self):
        pass


class Fetcher(QObject):
    """Lives on its own QThread: sizes and downloads one repository at a time."""

    sized = Signal(str, str)  # repo, what there is to download (or why nothing can be)
    progress = Signal(int, int, str)  # done, total, unit
    finished = Signal(str, str)  # repo, local directory
    failed = Signal(str, str)  # repo, one-line reason

    @Slot(str)
    def size(self, repo: str) -> None:
        """In the cache already, the size to download, or (the hub silent) that it is offline."""
        local = hub.cached(repo)
        if local is not None:
            self.sized.emit(repo, f"already in the cache: {local}")
            return
        size = hub.download_size(repo)
        self.sized.emit(
            repo,
            f"{size / 1e9:.2f} GB to download"
            if size
            else "nothing left to download"
            if size == 0
            else hub.offline_sentence(repo),
        )

    @Slot(str)
    def fetch(self, repo: str) -> None:
        try:
            path = hub.resolve(repo, tqdm_class=_progress_class(self.progress.emit))
        except DsparkError as e:  # one sentence already
            self.failed.emit(repo, str(e))
            return
        except Exception as e:  # anything else the hub library raises: its first sentence
            first = re.split(r"(?<=[.!?])\s", " ".join(str(e).split()), maxsplit=1)[0]
            self.failed.emit(repo, f"cannot download {repo}: {first[:200] or type(e).__name__}")
            return
        self.finished.emit(repo, str(path))


class DownloadDialog(QDialog):
    chosen = Signal(str, str)  # kind ("target" or "drafter"), local directory
    request_size = Signal(str)
    request_fetch = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Download a Gemma-4 target or drafter")
        self.resize(720, 520)
        lay = QVBoxLayout(self)
        self.list = QListWidget()
        for kind, title in (("target", "Targets"), ("drafter", "Drafters")):
            header = QListWidgetItem(title)
            header.setFlags(Qt.NoItemFlags)
            self.list.addItem(header)
            for p in hub.PUBLISHED:
                if p.kind == kind:
                    item = QListWidgetItem(f"  {p.repo}  —  {p.note}")
                    item.setData(REPO_ROLE, p.repo)
                    self.list.addItem(item)
        self.list.currentItemChanged.connect(self._selected)
        lay.addWidget(self.list, 1)
        row = QHBoxLayout()
        row.addWidget(QLabel("Or a name:"))
        self.name = QLineEdit()
        self.name.setPlaceholderText("org/model, e.g. mlx-community/gemma-4-e2b-it-4bit")
        row.addWidget(self.name, 1)
        lay.addLayout(row)
        self.info = QLabel()
        self.info.setWordWrap(True)
        self.info.setObjectName("caption")
        lay.addWidget(self.info)
        self.bar = QProgressBar()
        self.bar.hide()
        lay.addWidget(self.bar)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        self.download_b = QPushButton("Download")
        self.download_b.setDefault(True)
        buttons.addButton(self.download_b, QDialogButtonBox.AcceptRole)
        buttons.rejected.connect(self.reject)
        self.download_b.clicked.connect(self.start)
        lay.addWidget(buttons)

        self.thread_ = QThread(self)
        self.fetcher = Fetcher()
        self.fetcher.moveToThread(self.thread_)
        self.request_size.connect(self.fetcher.size)
        self.request_fetch.connect(self.fetcher.fetch)
        self.fetcher.sized.connect(self.on_sized)
        self.fetcher.progress.connect(self.on_progress)
        self.fetcher.finished.connect(self.on_finished)
        self.fetcher.failed.connect(self.on_failed)
        self.thread_.start()
        self.busy = False
        self._show_disk()

    # --- choosing --------------------------------------------------------------------------
    def repo(self) -> str:
        """The typed name, else the selected item's."""
        typed = self.name.text().strip()
        if typed:
            return typed
        item = self.list.currentItem()
        return item.data(REPO_ROLE) if item is not None and item.data(REPO_ROLE) else ""

    def _selected(self, item, _previous=None) -> None:
        if item is not None and item.data(REPO_ROLE) and not self.busy and not self.name.text().strip():
            self._show_disk(f"{item.data(REPO_ROLE)}: size …")
            self.request_size.emit(item.data(REPO_ROLE))

    def _show_disk(self, first: str = "") -> None:
        where = hub.cache_dir()
        free = shutil.disk_usage(hub._existing_parent(where)).free
        self.info.setText((first + "\n" if first else "") + f"Hugging Face cache: {where} ({free / 1e9:.1f} GB free)")

    # --- downloading -----------------------------------------------------------------------
    def start(self) -> None:
        repo = self.repo()
        if self.busy or not repo:
            return
        if not hub.is_repo_id(repo):
            self.on_failed(repo, "not a Hugging Face name of the form org/model")
            return
        self.busy = True
        self.download_b.setEnabled(False)
        self.bar.setRange(0, 0)
        self.bar.show()
        self._show_disk(f"{repo}: fetching …")
        self.request_fetch.emit(repo)

    @Slot(str, str)
    def on_sized(self, repo: str, text: str) -> None:
        if repo == self.repo() and not self.busy:
            self._show_disk(text if repo in text else f"{repo}: {text}")

    @Slot(int, int, str)
    def on_progress(self, done: int, total: int, unit: str) -> None:
        if total:
            self.bar.setRange(0, total)
            self.bar.setValue(done)
            self.bar.setFormat(f"%v / %m {unit}")

    @Slot(str, str)
    def on_finished(self, repo: str, path: str) -> None:
        self.busy = False
        self.download_b.setEnabled(True)
        self.bar.hide()
        self._show_disk(f"{repo}: ready in {path}")
        self.chosen.emit(hub.kind_of(path), path)

    @Slot(str, str)
    def on_failed(self, repo: str, reason: str) -> None:
        """One sentence: the library's names the repository already (never twice)."""
        self.busy = False
        self.download_b.setEnabled(True)
        self.bar.hide()
        self._show_disk(reason if repo in reason else f"{repo}: {reason}")

    def shutdown(self) -> None:
        """End the download thread (a download in flight cannot be interrupted: wait for it)."""
        self.thread_.quit()
        self.thread_.wait(60_000)
