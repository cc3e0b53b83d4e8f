"""Developer tools that are not part of the served package (the demo model's training)."""
