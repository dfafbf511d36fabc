"""The status pages: the document (document.py), the HTML page (page.py), its graph and
charts (svg.py) and their last hour (history.py)."""
