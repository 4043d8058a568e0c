"""The parts the report's section builders are made of: frames, tables, figures and analyses.

A section module (``report/sections/<problem>.py``) is the table of contents of its problem: its
``build(ctx)`` calls the parts, one module per concern (``parts/<topic>_<concern>.py``). Parts
import each other and the shared helpers (``tables``, ``plots``, ``checks``), never a section.
"""
