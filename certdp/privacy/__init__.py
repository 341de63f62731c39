"""Privacy: sensitivity staircases, noise mechanisms, amplification and composition."""
