"""The mnist recipe: an MLP on handwritten digits (data parallel)."""
