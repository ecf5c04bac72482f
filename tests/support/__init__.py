"""Test helpers and test doubles (each double is named as one)."""
