"""The seq2seq recipe: a model-parallel LSTM encoder/decoder on a toy translation task."""
