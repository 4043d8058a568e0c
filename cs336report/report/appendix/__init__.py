"""The report's appendix: the records' provenance and the table of experiments (provenance), the
cost of the run per rule and per section (cost), the parts of a cell's time besides its timed steps
(cost_parts), what counts as timed (timed_steps), and the run's span and forecast (run_time)."""
