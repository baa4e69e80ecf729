"""The parts of Li et al.'s dynamic spatial-temporal graph convolutional decoder (models/dyn_stgcd.py assembles
them): the evolving graph convolution, the random-walk kernel, the dilated causal convolution, the block, and the
target graph (gold graphs, losses, tree decoding)."""
