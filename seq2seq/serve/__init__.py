"""A translation server and a page that shows both models' attention (``python -m seq2seq.serve``).

``models`` loads runs as ``eval.py`` does, ``batching`` searches concurrent requests together,
``app`` holds the HTTP API and serves ``static/``, the page (plain HTML, CSS and JavaScript: no
build step, nothing fetched from the internet).
"""
