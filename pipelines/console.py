"""What a person sees of ``ga-tfx run``: one line per component, live progress, the summary.

Everything else -- absl logs of every component, Beam, TensorFlow's C++ logs, Python warnings --
goes to a log file: :class:`RunConsole` points the process's file descriptors 1 and 2 at it and
keeps a duplicate of the terminal for its own lines. Until the run's inputs are checked the log
is a temporary file (a run refused for bad input writes nothing in the output directory); then
it moves to ``<output-dir>/logs/<pipeline>-<time>.log``.

Progress comes from the Trainer and the Tuner through
:mod:`ga_tfx.components.trainer.progress` (a listener this console installs). On a terminal the
progress line redraws in place; otherwise (CI, a file) it prints a few plain lines: at 25 %,
50 %, 75 % and 100 % of the windows.

Standard library only (and the logger's name, :mod:`ga_tfx.pipelines.common.user_log`).
"""

from ga_tfx.pipelines.common.user_log import USER_LOGGER

import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, Optional, TextIO

_MILESTONES = (0.25, 0.5, 0.75, 1.0)
# Records of USER_LOGGER (e.g. a data warning before the run) are shown to the person; without
# a console they reach stderr through logging's last-resort handler.


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class RunConsole:
    """Routes a run's output: the person's lines to the terminal, the rest to a log file.

    Args:
      verbose: leave every output on the console (no redirection, no log file).
      stream: where the person's lines go (default: this process's stdout at entry).
    """

    def __init__(self, verbose: bool = False, stream: Optional[TextIO] = None):
        self.verbose = verbose
        self.log_path: Optional[str] = None
        self._stream = stream
        self._saved_fds: list = []
        self._log_file: Optional[TextIO] = None
        self._open_line = False
        self._component_start: Dict[str, float] = {}
        self._cached: set = set()
        self._progress: Dict[str, Any] = {}
        self._handler: Optional[logging.Handler] = None
        self._own_stream: Optional[TextIO] = None

    # ------------------------------------------------------------------ set-up
    def __enter__(self) -> "RunConsole":
        from ga_tfx.components.trainer import progress

        out = self._stream or sys.stdout
        if not self.verbose:
            sys.stdout.flush()
            sys.stderr.flush()
            self._saved_fds = [os.dup(1), os.dup(2)]
            if self._stream is None:
                out = self._own_stream = os.fdopen(os.dup(self._saved_fds[0]), "w", buffering=1)
            handle, path = tempfile.mkstemp(prefix="ga-tfx-", suffix=".log")
            os.close(handle)
            self._redirect(path)
        self._out = out
        self._tty = bool(getattr(out, "isatty", lambda: False)())
        self._handler = _ComponentLines(self)
        logging.getLogger("absl").addHandler(self._handler)
        self._user_handler = _UserLines(self)
        user_logger = logging.getLogger(USER_LOGGER)
        user_logger.addHandler(self._user_handler)
        # Informational lines too (e.g. the data summary of a --label run), not only warnings.
        self._user_level = user_logger.level
        user_logger.setLevel(logging.INFO)
        progress.set_listener(self._on_progress)
        return self

    def __exit__(self, *exc_info) -> None:
        from ga_tfx.components.trainer import progress

        progress.set_listener(None)
        if self._handler is not None:
            logging.getLogger("absl").removeHandler(self._handler)
            logging.getLogger(USER_LOGGER).removeHandler(self._user_handler)
            logging.getLogger(USER_LOGGER).setLevel(self._user_level)
        self._end_line()
        if self._saved_fds:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(self._saved_fds[0], 1)
            os.dup2(self._saved_fds[1], 2)
            for fd in self._saved_fds:
                os.close(fd)
            self._saved_fds = []
            if self._log_file is not None:
                self._log_file.close()
        if self._own_stream is not None:
            self._own_stream.close()
            self._own_stream = None

    def _redirect(self, path: str) -> None:
        log_file = open(path, "a", buffering=1)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        if self._log_file is not None:
            self._log_file.close()
        self._log_file, self.log_path = log_file, path

    def keep_log(self, directory: str, name: str) -> Optional[str]:
        """Moves the log into ``directory`` (created) as ``<name>-<time>.log``: call it once
        the inputs are checked. Returns the log's path (None when verbose)."""
        if self.verbose or self.log_path is None:
            return None
        os.makedirs(directory, exist_ok=True)
        final = os.path.join(directory, f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.log")
        temporary = self.log_path
        sys.stdout.flush()
        sys.stderr.flush()
        shutil.copyfile(temporary, final)
        self._redirect(final)
        os.remove(temporary)
        return final

    # ------------------------------------------------------------------ the person's lines
    def line(self, text: str = "") -> None:
        """One finished line on the terminal."""
        self._end_line()
        self._out.write(text + "\n")
        self._out.flush()

    def _redraw(self, text: str) -> None:
        self._out.write("\r\033[K" + text)
        self._out.flush()
        self._open_line = True

    def _end_line(self) -> None:
        if self._open_line:
            self._out.write("\n")
            self._out.flush()
            self._open_line = False

    # ------------------------------------------------------------------ components
    def component_started(self, name: str) -> None:
        self._component_start[name] = time.monotonic()
        self._progress = {}
        if self._tty:
            self._redraw(f"  {name:<18} running")
        else:
            self.line(f"  {name:<18} running")

    def component_cached(self, name: str) -> None:
        self._cached.add(name)

    def component_finished(self, name: str) -> None:
        seconds = time.monotonic() - self._component_start.pop(name, time.monotonic())
        state = "cached" if name in self._cached else "done"
        text = f"  {name:<18} {state} in {seconds:.1f} s"
        if self._tty:
            self._redraw(text)
            self._end_line()
        else:
            self.line(text)

    # ------------------------------------------------------------------ progress
    def _on_progress(self, event: Dict[str, Any]) -> None:
        window, total = event["window"], event["total"]
        label = event.get("label", "Trainer")
        state = self._progress
        if state.get("label") != label:
            state.clear()
            state.update(
                label=label, start=time.monotonic(), start_window=window - 1, printed=set()
            )
        done = window - state["start_window"]
        elapsed = time.monotonic() - state["start"]
        remaining = (total - window) * elapsed / done if done > 0 else 0.0
        parts = [f"  {label:<18} window {window}/{total}"]
        if event.get("loss") is not None:
            parts.append(f"loss {event['loss']:.4g}")
        if event.get("samples_per_second"):
            parts.append(f"{event['samples_per_second']:.0f} samples/s")
        parts.append(f"ETA {_duration(remaining)}")
        text = "  ".join(parts)
        if self._tty:
            self._redraw(text)
            return
        for milestone in _MILESTONES:
            if window >= milestone * total and milestone not in state["printed"]:
                state["printed"].add(milestone)
                self.line(text)
                break


class _ComponentLines(logging.Handler):
    """Turns LocalDagRunner's and the launcher's log records into component lines."""

    def __init__(self, console: RunConsole):
        super().__init__(level=logging.INFO)
        self._console = console
        self._current: Optional[str] = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        if not isinstance(message, str):
            return
        if message == "Component %s is running." and record.args:
            self._current = str(record.args[0])
            self._console.component_started(self._current)
        elif message == "Component %s is finished." and record.args:
            self._console.component_finished(str(record.args[0]))
            self._current = None
        elif message.startswith("A cached execution") and self._current:
            self._console.component_cached(self._current)


class _UserLines(logging.Handler):
    """Shows the records of :data:`USER_LOGGER` on the console (``warning: ...``)."""

    def __init__(self, console: RunConsole):
        super().__init__(level=logging.INFO)
        self._console = console

    def emit(self, record: logging.LogRecord) -> None:
        prefix = "warning: " if record.levelno >= logging.WARNING else ""
        self._console.line(prefix + record.getMessage())
