"""Building blocks shared by several methods."""
