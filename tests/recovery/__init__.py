"""Tests of recovery: check, repair, salvage and imports."""
