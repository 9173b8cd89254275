"""The mnist_model_parallel recipe: the MNIST MLP split over two ranks."""
