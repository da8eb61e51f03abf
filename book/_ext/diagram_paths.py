"""The site links the diagram files (cached once, shared by every page) instead of the copies
the notebooks embed for Colab (scripts/embed_diagrams.py)."""
import base64
import re

DATA = re.compile(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)")
MARKER = re.compile(rb"<dc:identifier>llmcore-diagram:([\w-]+)</dc:identifier>")


def _path(m):
    found = MARKER.search(base64.b64decode(m.group(1)))
    return f"../book/_static/diagrams/{found.group(1).decode()}.svg" if found else m.group(0)


def _source_read(app, docname, source):
    if docname.startswith("chapters/"):
        source[0] = DATA.sub(_path, source[0])


def setup(app):
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
