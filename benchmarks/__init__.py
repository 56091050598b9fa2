"""Speed and retrieval benchmarks; their results files back the README's figures (``benchmarks.readme_figures``)."""
