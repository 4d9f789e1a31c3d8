"""ember's benchmark runner: a model suite measured under eager, torch.compile and ember backends.

`python -m benchmarks.run` runs the suite and writes JSON lines, a Markdown dashboard and a
PNG chart; `python -m benchmarks.report` rebuilds the dashboard and chart from JSON lines.
See benchmarks/README.md for what is measured and how.
"""
