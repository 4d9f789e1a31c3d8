"""Tests of the benchmark runner's pure parts: accuracy rule, records, dashboard, backends."""
