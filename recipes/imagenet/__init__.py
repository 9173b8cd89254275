"""The imagenet recipe: ResNet-50, AlexNet, GoogLeNet(BN) and NIN on a labeled image list."""
