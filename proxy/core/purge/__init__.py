"""Purges: what each kind covers, its receipt, and its place in the fleet's numbered log."""
