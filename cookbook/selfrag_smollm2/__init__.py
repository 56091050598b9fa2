"""The recipe that builds the bundled ``selfrag-smollm2-135m`` model on a CPU."""
