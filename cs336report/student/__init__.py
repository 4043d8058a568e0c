"""The student's checkout: whose implementation a cell runs, ours or the student's through the
handout's adapters (resolve), the probes of a checkout before any cell runs (check), and our own
implementations behind the handout's adapter names (adapters)."""
