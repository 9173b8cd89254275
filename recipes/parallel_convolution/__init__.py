"""The parallel_convolution recipe: convolutions whose channels are split over ranks."""
