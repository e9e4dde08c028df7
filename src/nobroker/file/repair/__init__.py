"""The way back from a damaged log: reading its intact batches and salvaging them
into a new generation."""
