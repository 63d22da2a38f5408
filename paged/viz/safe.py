"""Hostile text made harmless, and drawing that fails as one line instead of a traceback.

Everything that comes from a trace (run names, request ids, header fields), the URL, a form or
an upload is *data*. It reaches the page through exactly one of these:

- ``html_text`` for HTML and SVG text and attribute values (quotes escaped too);
- ``md_text`` for anything Streamlit renders as markdown (``st.caption``, ``st.info``,
  ``st.error``, ...): one line, every mark that can open markup backslash-escaped, so
  ``![x](url)`` stays text and fetches nothing, and ``:red[..]`` or ``$..$`` stay text;
- ``plotly_text`` for plotly labels and hover text (plotly renders a small HTML subset).

Ids that end up in attributes (SVG ``<pattern id>``, CSS classes, element keys) are never the
user's string: callers derive them from an index. ``report`` turns an exception into one line
(its type and a reference, never a server path) while the details go to the server log under the
same reference; ``paged.viz.app.boundary`` shows that line on the page.
"""

from __future__ import annotations

import html
import logging
import re
import string
import threading
import uuid

log = logging.getLogger("paged.viz.safe")

MAX_SHOWN = 300  # characters of untrusted text shown in one line
#: The largest upload the app takes, in MB (also server.maxUploadSize in .streamlit/config.toml,
#: which Streamlit enforces first). Anything the app hands out to open again must fit it.
MAX_UPLOAD_MB = 8
UPLOAD_BYTES = MAX_UPLOAD_MB * 1_000_000
# Marks that open markup anywhere in a line (links, images, emphasis, code, HTML, math,
# Streamlit's :colour[..] directives, tables); a leading one may open a list, heading or quote.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>!$~|{}#&:])")
# GFM links bare URLs and e-mail addresses *after* escapes are resolved, so no escape stops
# it; inside a code span it does not happen.
_LINKISH = re.compile(r"(\S*(?:[a-z][a-z0-9+.-]*://|www\.|@)\S*)", re.IGNORECASE)
_LEADING = set(string.punctuation) - {"\\"}
_ORDERED = re.compile(r"^(\d{1,9})([.)])(?=\s|$)")  # a list marker needs a space after it
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]+")

# Folding an uploaded trace costs memory in proportion to its size; a room uploading at once
# folds one file at a time (the others wait), so the server's peak stays that of one fold.
MAX_CONCURRENT_FOLDS = 1
FOLDS = threading.BoundedSemaphore(MAX_CONCURRENT_FOLDS)


def one_line(text: object, limit: int = MAX_SHOWN) -> str:
    """``text`` as a single printable line of at most ``limit`` characters: control
    characters, line and paragraph separators and bidi overrides become one space."""
    s = _CONTROL.sub(" ", str(text)).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def html_text(text: object, limit: int | None = None) -> str:
    """Escape for HTML/SVG text or a quoted attribute value (``<>&'"`` all escaped)."""
    s = str(text) if limit is None else one_line(text, limit)
    return html.escape(s, quote=True)


def md_text(text: object, limit: int = MAX_SHOWN) -> str:
    """Escape for Streamlit markdown: one line, each mark that can open markup (and a leading
    punctuation mark: lists, headings, quotes) backslash-escaped, so nothing in it is markup.
    CommonMark allows a backslash before any ASCII punctuation."""
    parts = _LINKISH.split(one_line(text, limit))  # odd indices: link-like words
    done = [_code_span(p) if n % 2 else _MD_SPECIAL.sub(r"\\\1", p) for n, p in enumerate(parts)]
    if done[0][:1] in _LEADING:  # a list, heading or quote marker (not a code span: n = 0)
        done[0] = "\\" + done[0]
    done[0] = _ORDERED.sub(r"\1\\\2", done[0])
    return "".join(done)


def _code_span(text: str) -> str:
    """``text`` as a markdown code span: literal, never a link (fence longer than any run of
    backticks inside it)."""
    fence = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def plotly_text(text: object, limit: int = MAX_SHOWN) -> str:
    """Escape for plotly text (labels, hover, annotations), which renders HTML tags."""
    return html.escape(one_line(text, limit), quote=True)


def report(error: BaseException, message: str) -> str:
    """Log ``error`` with its traceback under a fresh reference; return the one line a viewer
    sees: ``message`` with the error's type and the reference (no paths, no traceback)."""
    ref = uuid.uuid4().hex[:8]
    log.error("%s [ref %s]", message, ref, exc_info=error)
    return f"{message} ({type(error).__name__}, ref {ref})"
