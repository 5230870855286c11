"""OpShin validators and their compiled artifacts."""
