"""The dcgan recipe: a generator/discriminator pair trained with two optimizers."""
