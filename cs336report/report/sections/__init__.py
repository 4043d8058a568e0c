"""Report sections, one module per assignment problem, in the handout's order.

A section module has ``ID`` (the handout's problem name), ``TITLE``, ``EXPERIMENTS`` (the
experiments, i.e. rules, whose results it reads) and ``build(ctx) -> dict``, returning the
variables of its template partial ``templates/sections/<ID>.j2``.
"""

from . import benchmarking_script

SECTIONS = [benchmarking_script]
