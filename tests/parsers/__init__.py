"""Tests of the parsers package."""
