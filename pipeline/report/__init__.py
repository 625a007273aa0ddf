"""Parsed tables -> self-contained Jinja2 HTML reports (no network, no CDN)."""
