"""Helpers shared by test modules (scripted backends, real servers, paths); no tests live here."""
