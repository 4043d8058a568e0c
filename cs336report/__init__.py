"""cs336report: run the CS336 Systems experiments and render the writeup from their results."""

__version__ = "0.1.0"
