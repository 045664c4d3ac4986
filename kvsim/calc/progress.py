"""A progress line for long measurements that leaves its final state as plain text.

Contract
- :func:`progress` wraps an iterable (or counts ``update`` calls up to ``total``) and reports
  "desc: n/total unit (p %)". It lives here, in the lowest layer, so serving/ and measure/ can both use it;
  it imports no widget library (IPython's display only when running inside a kernel, where it is loaded).
- In a Jupyter kernel: a live line (one display updated in place, at most every ``MIN_INTERVAL_S``) that
  is emptied at the end, and a final line on stdout, "desc: n/total unit in 3.1 s". A saved notebook,
  GitHub and nbviewer show that final line (a tqdm widget shows "0%" there), and nbval sees the same
  outputs as the stored ones (the live display's updates are not compared; it starts and ends empty).
- In a terminal: the live line on stderr with carriage returns when stderr is a TTY, then the final line.
  Elsewhere (logs, captured output): only the final line, on stderr.
"""

from __future__ import annotations

import sys
import time

MIN_INTERVAL_S = 0.2


class _Text:
    """Something IPython displays as exactly this text."""

    def __init__(self, text: str):
        self.text = text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text}


def _in_kernel() -> bool:
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class Progress:
    """Counts work done; see :func:`progress`."""

    def __init__(self, iterable=None, total: int | None = None, desc: str = "", unit: str = "steps",
                 enabled: bool = True):
        self.iterable, self.desc, self.unit, self.enabled = iterable, desc, unit, enabled
        self.total = len(iterable) if total is None and hasattr(iterable, "__len__") else total
        self.n, self.note, self.closed = 0, "", False
        self.start = self.shown_at = time.perf_counter()
        self._live = None
        self._tty = False
        if enabled and _in_kernel():
            from IPython.display import display
            self._live = display(_Text(""), display_id=True)
        elif enabled:
            self._tty = sys.stderr.isatty()

    def line(self, final: bool = False) -> str:
        """'desc: 3/8 runs (38 %), note' while running; 'desc: 8/8 runs in 2.4 s' at the end."""
        count = f"{self.n:,}/{self.total:,}" if self.total else f"{self.n:,}"
        if final:
            text = f"{self.desc}: {count} {self.unit} in {time.perf_counter() - self.start:.1f} s"
        else:
            share = f" ({100 * self.n // self.total} %)" if self.total else ""
            text = f"{self.desc}: {count} {self.unit}{share}"
        return text + (f", {self.note}" if self.note else "")

    def _show(self, text: str):
        if self._live is not None:
            self._live.update(_Text(text))
        elif self._tty:
            sys.stderr.write("\r" + text)
            sys.stderr.flush()

    def update(self, n: int = 1):
        """Count ``n`` more units of work done."""
        self.n += n
        now = time.perf_counter()
        if self.enabled and now - self.shown_at >= MIN_INTERVAL_S:
            self.shown_at = now
            self._show(self.line())

    def set_postfix_str(self, note: str):
        """A short note after the count (e.g. which run is going on)."""
        self.note = note

    def close(self):
        """Replace the live line by the final one (once)."""
        if self.closed or not self.enabled:
            self.closed = True
            return
        self.closed = True
        final = self.line(final=True)
        if self._live is not None:
            self._live.update(_Text(""))
            print(final, flush=True)
        else:
            sys.stderr.write(("\r" if self._tty else "") + final + "\n")
            sys.stderr.flush()

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(iterable=None, total: int | None = None, desc: str = "", unit: str = "steps",
             enabled: bool = True) -> Progress:
    """A :class:`Progress` over ``iterable`` (or ``total`` units counted with ``update``); off if not ``enabled``."""
    return Progress(iterable, total, desc, unit, enabled)
