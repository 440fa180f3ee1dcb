"""What the supervisor observes about a training run: checkpoints and TensorBoard scalars."""
