"""Image inputs: find image parts in requests, validate and fetch them, refuse them where unseen."""
