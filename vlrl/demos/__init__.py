"""Worked examples that use vlrl only through its public API: ``shapes`` is what ``vlrl demo`` runs."""
