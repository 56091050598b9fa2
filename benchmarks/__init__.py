"""Speed, retrieval and trust benchmarks; their results files back the figures of the README and docs/
(``benchmarks.readme_figures``)."""
