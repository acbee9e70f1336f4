"""Evaluation reports: readers and plots shared by the notebooks (see reports.py)."""
