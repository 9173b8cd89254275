"""The cifar recipe: a VGG-style network on CIFAR-10 (local files or synthetic)."""
